"""agents: the actor kernel. Supervised, concurrent actors with bounded mailboxes and ordered services.

Knows nothing of Kafka, tables or codecs; mode-streaming is used here and only here.
"""

from agents.actor import ActorGroup, Behaviour
from agents.errors import AgentsError, Crashed, Fatal, MailboxClosed, MaxRestartsExceeded
from agents.mailbox import Mailbox
from agents.service import Service, ServiceState, cancel_and_wait
from agents.supervisor import RestartPolicy, Supervisor

__all__ = [
    "ActorGroup",
    "AgentsError",
    "Behaviour",
    "Crashed",
    "Fatal",
    "Mailbox",
    "MailboxClosed",
    "MaxRestartsExceeded",
    "RestartPolicy",
    "Service",
    "ServiceState",
    "Supervisor",
    "cancel_and_wait",
]
