"""The worker's web server: table queries routed to the owner of the key, health and readiness."""
