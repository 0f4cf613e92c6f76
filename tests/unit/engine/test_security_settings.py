"""Security settings: read from the environment (and the CLI's options), checked at start with one clear
line, turned into aiokafka's options (SASL names, an SSL context from PEM files), the password never shown."""

from __future__ import annotations

import os
import ssl
import subprocess
from typing import TYPE_CHECKING

import pytest

from engine.errors import ConfigError
from engine.settings_load import load_settings
from engine.transport.kafka_connect import client_options

if TYPE_CHECKING:
    from engine.settings import Settings

SECRET = "s3cret-never-shown"
CA = "/etc/ssl/certs/ca-certificates.crt"


def settings(**env: str) -> Settings:
    return load_settings("secured", {"broker": "kafka://broker:9093"},
                         environ={f"ENGINE_{k.upper()}": v for k, v in env.items()})


def test_sasl_settings_from_the_environment_become_aiokafkas_options():
    found = settings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="app",
                     sasl_password=SECRET, ssl_cafile=CA)
    options = client_options(found.client_options())
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("app", SECRET)
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert not any(name.startswith(("sasl_username", "ssl_cafile")) for name in options)
    assert SECRET not in repr(found)


def test_broker_options_win_over_the_security_settings():
    found = load_settings("secured", {"broker": "kafka://b:9093", "security_protocol": "SASL_PLAINTEXT",
                                      "sasl_mechanism": "PLAIN", "sasl_username": "app",
                                      "sasl_password": SECRET,
                                      "broker_options": {"sasl_mechanism": "SCRAM-SHA-256"}}, environ={})
    assert found.client_options()["sasl_mechanism"] == "SCRAM-SHA-256"
    assert client_options(found.client_options())["security_protocol"] == "SASL_PLAINTEXT"
    assert "ssl_context" not in client_options(found.client_options())


def test_a_client_certificate_makes_an_ssl_context_with_it(tmp_path):
    key, cert = tmp_path / "client.key", tmp_path / "client.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=engine-test", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    found = settings(security_protocol="SSL", ssl_cafile=str(cert), ssl_certfile=str(cert),
                     ssl_keyfile=str(key))
    assert isinstance(client_options(found.client_options())["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize(("env", "message"), [
    ({"security_protocol": "SASL"}, "ENGINE_SECURITY_PROTOCOL=SASL: expected one of"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_username": "a",
      "sasl_password": SECRET}, "ENGINE_SASL_MECHANISM=GSSAPI: expected one of"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "a"},
     "needs sasl_username and sasl_password (ENGINE_SASL_USERNAME, ENGINE_SASL_PASSWORD)"),
    ({"sasl_username": "a", "sasl_password": SECRET}, "SASL settings are given but security_protocol is "
                                                      "PLAINTEXT"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "a",
      "sasl_password": SECRET, "ssl_cafile": CA}, "TLS files are given but security_protocol is "
                                                  "SASL_PLAINTEXT"),
    ({"security_protocol": "SSL", "ssl_certfile": CA}, "ssl_certfile and ssl_keyfile go together"),
    ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"},
     "ENGINE_SSL_CAFILE=/no/such/ca.pem: expected a readable"),
])
def test_a_wrong_security_setting_is_one_clear_line_without_the_password(env, message):
    with pytest.raises(ConfigError) as raised:
        settings(**env)
    assert message in str(raised.value)
    assert SECRET not in str(raised.value)


def test_the_cli_options_reach_every_command_as_settings(monkeypatch, capsys):
    from cli.main import main

    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD"):
        monkeypatch.delenv(f"ENGINE_{name}", raising=False)
    code = main(["topics", "-A", "examples.wordcount:app", "--broker", "kafka://127.0.0.1:1",
                 "--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "app"])
    assert code == 1
    assert "needs sasl_username and sasl_password" in capsys.readouterr().err
    assert "ENGINE_SASL_USERNAME" not in os.environ  # options reach the settings, not the environment
