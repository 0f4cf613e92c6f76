"""Certificates for a TLS test broker, made with the openssl command at start: a CA, the broker's (for
127.0.0.1 and localhost) and a client's (CN=admin), all PEM, keys unencrypted PKCS#8 as Kafka's PEM stores
want them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA's certificate: the truststore of both sides
    broker_store: Path  # the broker's key and certificate in one PEM file (Kafka's PEM keystore)
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: a client trusting only it refuses the broker


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _signed(folder: Path, name: str, subject: str, ca: Path, ca_key: Path,
            alt: str | None) -> tuple[Path, Path]:
    key, request, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key),
             "-out", str(request))
    extra: list[str] = []
    if alt is not None:
        extension = folder / f"{name}.ext"
        extension.write_text(f"subjectAltName={alt}\n")
        extra = ["-extfile", str(extension)]
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "2", "-out", str(cert), *extra)
    return cert, key


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=engine-test-ca",
             "-keyout", str(ca_key), "-out", str(ca))
    other_ca, other_key = folder / "other-ca.pem", folder / "other-ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=someone-else",
             "-keyout", str(other_key), "-out", str(other_ca))
    broker_cert, broker_key = _signed(folder, "broker", "/CN=broker", ca, ca_key,
                                      "IP:127.0.0.1,DNS:localhost")
    store = folder / "broker-store.pem"
    store.write_text(broker_key.read_text() + broker_cert.read_text())
    client_cert, client_key = _signed(folder, "client", "/CN=admin", ca, ca_key, None)
    return Certificates(ca, store, client_cert, client_key, other_ca)
