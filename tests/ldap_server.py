"""A real LDAP directory for the tests: Debian's slapd run as a subprocess on a loopback
port, with its configuration, certificates and database in a temporary folder, and a lab's
people and groups loaded with ldapadd (Debian's ldap-utils).

The directory, dc=lab,dc=example:
  ou=people: lena (in lab-leads), ann (in lab-annotators), guest (in no group), each with
  the password ``<uid>-pw``, a given name, a surname and an e-mail address;
  ou=groups: lab-leads, lab-annotators (groupOfNames).
The bind account cn=admin,dc=lab,dc=example (password ``admin-pw``) may search it;
anonymous clients may only bind. STARTTLS is offered with a certificate for 127.0.0.1
signed by a CA the tests write (``ca_file``); ``other_ca_file`` is a CA that signed
nothing here.

Without slapd the tests that need it are skipped, except in CI (CI=true), where a missing
slapd fails them: `make test` installs it (Makefile)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SLAPD = Path("/usr/sbin/slapd")
LDAPADD = shutil.which("ldapadd") or "/usr/bin/ldapadd"
SCHEMAS = Path("/etc/ldap/schema")
MODULES = Path("/usr/lib/ldap")

BASE = "dc=lab,dc=example"
ADMIN_DN = f"cn=admin,{BASE}"
ADMIN_PASSWORD = "admin-pw"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"

# uid -> (given name, surname, groups)
PERSONS: dict[str, tuple[str, str, list[str]]] = {
    "lena": ("Lena", "Lead", ["lab-leads"]),
    "ann": ("Ann", "Notator", ["lab-annotators"]),
    "guest": ("Gus", "Guest", []),
}


def password_of(uid: str) -> str:
    return f"{uid}-pw"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _certificates(folder: Path) -> None:
    """ca.pem signs server.pem (127.0.0.1 and localhost); other-ca.pem signs nothing."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def ca(common: str) -> tuple[Any, x509.Certificate]:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    ca_key, ca_cert = ca("Steplab test CA")
    _, other_cert = ca("Some other CA")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (folder / "other-ca.pem").write_bytes(other_cert.public_bytes(pem))
    (folder / "server.pem").write_bytes(cert.public_bytes(pem))
    (folder / "server.key").write_bytes(
        key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )


def _config(folder: Path) -> str:
    schemas = "\n".join(
        f"include {SCHEMAS / name}.schema" for name in ("core", "cosine", "inetorgperson", "nis")
    )
    return f"""{schemas}
pidfile {folder}/slapd.pid
argsfile {folder}/slapd.args
modulepath {MODULES}
moduleload back_mdb
TLSCACertificateFile {folder}/ca.pem
TLSCertificateFile {folder}/server.pem
TLSCertificateKeyFile {folder}/server.key
database mdb
maxsize 10485760
suffix "{BASE}"
rootdn "{ADMIN_DN}"
rootpw {ADMIN_PASSWORD}
directory {folder}/db
access to attrs=userPassword by anonymous auth by self read by * none
access to * by users read by * none
"""


def _entries() -> str:
    blocks = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Lab\ndc: lab",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups",
    ]
    members: dict[str, list[str]] = {}
    for uid, (given, surname, groups) in PERSONS.items():
        blocks.append(
            f"dn: uid={uid},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
            f"cn: {given} {surname}\ngivenName: {given}\nsn: {surname}\n"
            f"mail: {uid}@lab.example\nuserPassword: {password_of(uid)}"
        )
        for group in groups:
            members.setdefault(group, []).append(f"uid={uid},{PEOPLE}")
    for group in ("lab-leads", "lab-annotators"):
        lines = "".join(f"\nmember: {dn}" for dn in members[group])
        blocks.append(f"dn: cn={group},{GROUPS}\nobjectClass: groupOfNames\ncn: {group}{lines}")
    return "\n\n".join(blocks) + "\n"


class LdapServer:
    """slapd on ``uri`` until ``stop``; ``settings_for`` gives Steplab's settings for it."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="steplab-slapd-"))
        self.port = _free_port()
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.ca_file = str(self.folder / "ca.pem")
        self.other_ca_file = str(self.folder / "other-ca.pem")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> LdapServer:
        (self.folder / "db").mkdir()
        _certificates(self.folder)
        (self.folder / "slapd.conf").write_text(_config(self.folder))
        log = (self.folder / "slapd.log").open("wb")
        # -d 0: in the foreground (no fork), so the test owns the process and its exit.
        self._process = subprocess.Popen(
            [str(SLAPD), "-d", "0", "-f", str(self.folder / "slapd.conf"), "-h", self.uri],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"slapd stopped: {(self.folder / 'slapd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("slapd did not listen within 20 s") from None
                time.sleep(0.05)
        loaded = subprocess.run(
            [LDAPADD, "-x", "-H", self.uri, "-D", ADMIN_DN, "-w", ADMIN_PASSWORD],
            input=_entries().encode(),
            capture_output=True,
            timeout=30,
        )
        if loaded.returncode != 0:
            self.stop()
            raise RuntimeError(f"ldapadd failed: {loaded.stderr.decode()}")
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def environment(self, **extra: str) -> dict[str, str]:
        """STEPLAB_LDAP_* for this directory: a search as the bind account, groups under
        ou=groups, lab-leads -> lead of Demo, lab-annotators -> annotator of Demo."""
        env = {
            "STEPLAB_LDAP_URI": self.uri,
            "STEPLAB_LDAP_BIND_DN": ADMIN_DN,
            "STEPLAB_LDAP_BIND_PASSWORD": ADMIN_PASSWORD,
            "STEPLAB_LDAP_USER_SEARCH": PEOPLE,
            "STEPLAB_LDAP_GROUP_SEARCH": GROUPS,
            "STEPLAB_LDAP_ROLE_MAP": (
                '{"lab-leads": {"project": "Demo", "role": "lead"},'
                ' "lab-annotators": {"project": "Demo", "role": "annotator"}}'
            ),
        }
        env.update(extra)
        return env

    def configure(self, settings: Any, **extra: str) -> None:
        """Point pytest-django's ``settings`` at this directory, as the environment would."""
        from config import sso

        for key, value in sso.ldap_settings(self.environment(**extra)).items():
            setattr(settings, key, value)


def slapd_available() -> None:
    """Skip without slapd, or fail in CI, where `make test` must have installed it."""
    if SLAPD.exists() and Path(LDAPADD).exists():
        return
    message = f"needs Debian's slapd and ldap-utils ({SLAPD}, ldapadd): apt-get install slapd"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(message)
    pytest.skip(message)


def ldap_server_running() -> Iterator[LdapServer]:
    slapd_available()
    server = LdapServer().start()
    try:
        yield server
    finally:
        server.stop()
