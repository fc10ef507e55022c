"""Reading a file the config names, safely: a regular file, of a bounded size, never blocking.

Every file a config names, other than zone files and config bundles (the config itself,
region address lists, the API's token file, certificates and keys, DNSSEC keys, GeoIP
databases, monitors' CA files, TSIG secret files), is read here, the same way:

- it must be a regular file. A name pointing at anything else (a FIFO, a device such as
  ``/dev/zero``, a socket, a directory) is refused without being opened: it is looked at
  first (``stat``, following links), since opening a device can do things (``/dev/watchdog``
  starts a timer). The file then opened is checked again (``fstat``): it is opened with
  ``O_NONBLOCK``, so a FIFO swapped in meanwhile cannot block the open. A reload reads these
  files on the reactor thread: a blocked open would stop DNS and hold the reload lock;
- its size is capped by its `Kind`: a bigger file is refused before a byte is read, and one
  that grows past the cap while it is read (or says it is empty but is not, as the files
  of ``/proc`` do) is refused when it passes it. At most the cap and one byte are read;
- a secret (`SECRET`: the API's token file, a TSIG key's secret file; `USERS`) may not be readable
  or writable by others nor writable by its group: any local process could then read it,
  or set its own;
- a refusal is a `Refused`, an `OSError` (so callers' ``except OSError`` handle it) whose
  ``strerror`` says why and whose text names the file; the config's reader puts it at the
  key path that named the file.

Plain file work, no Twisted.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
#: bytes asked for per read
READ_SIZE = 1 * MiB


@dataclass(frozen=True, slots=True)
class Kind:
    """What a file is for, and so how big it may be (*cap*, bytes) and whether it is a secret."""

    what: str
    cap: int
    secret: bool = False


#: the config file itself: a config sync bundle holds at most 64 MiB in all
#: (`groupconfig.bundle.MAX_BYTES`), and a config of 5,000 virtual servers and 20,000
#: topology records is 2.4 MB; the YAML reader takes at most 500,000 values anyway
#: (`yamlsrc`)
CONFIG = Kind("a config file", 64 * MiB)
#: zone files (for `dnsdata.zonefile`): a static zone of a million records is about 50 MB
ZONE_FILE = Kind("a zone file", 256 * MiB)
#: a region's address list: a full BGP table (about 1.2 million prefixes) is some 20 MB
ADDRESS_LIST = Kind("an address list", 64 * MiB)
#: a secret: the API's token file (a token is at most 4096 characters, as `api.token`
#: reads the node's own, which it reads up to 8 KiB of too) or a TSIG key's secret_file
#: (a few dozen characters of base64)
SECRET = Kind("a secret file", 8 * KiB, secret=True)
#: the API's users file (``api.users_file``): names, roles and token hashes (some 150 bytes
#: an identity), private as a secret is (a hash is no token, but it is kept as /etc/shadow is)
USERS = Kind("a users file", 1 * MiB, secret=True)
#: PEM certificates, keys and CA bundles (the whole Mozilla CA bundle is about 220 KB)
PEM = Kind("a PEM file", 1 * MiB)
#: a DNSSEC private key (PKCS#8 PEM of P-256 or Ed25519: under 300 bytes)
DNSSEC_KEY = Kind("a DNSSEC key", 64 * KiB)
#: a MaxMind DB: GeoLite2-City is about 70 MB, GeoLite2-Country and -ASN under 10 MB each
GEOIP = Kind("a GeoIP database", 512 * MiB)


class Refused(OSError):
    """A file that is not read: not a regular file, too big, or a secret others may read.

    An OSError with ``strerror`` the reason and ``filename`` the file; its text is
    ``FILE: REASON``."""

    def __init__(self, path: str, reason: str):
        super().__init__(errno.EINVAL, reason, path)

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def read_bytes(path: str | os.PathLike[str], kind: Kind) -> bytes:
    """The bytes of the file at *path*, read as the module's docstring says. Raises OSError
    (`Refused` for a refusal)."""
    return b"".join(chunks(path, kind))


def read_text(path: str | os.PathLike[str], kind: Kind) -> str:
    """The text (UTF-8) of the file at *path*; text that is not UTF-8 is `Refused` too."""
    data = read_bytes(path, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(os.fspath(path), f"not UTF-8 text (byte {e.start}: {e.reason})") from None


def chunks(path: str | os.PathLike[str], kind: Kind, size: int = READ_SIZE) -> Generator[bytes, None, None]:
    """The bytes of the file at *path* in pieces of at most *size* (a caller working a piece
    per reactor turn holds the file open in between; closing the iterator closes it)."""
    name = os.fspath(path)
    fd = _open(name, kind)
    try:
        got = 0
        while True:
            data = os.read(fd, min(size, kind.cap + 1 - got))
            if not data:
                return
            got += len(data)
            if got > kind.cap:
                raise Refused(name, f"it grew past {size_text(kind.cap)} while read, more than {kind.what} may hold")
            yield data
    finally:
        os.close(fd)


def _open(name: str, kind: Kind) -> int:
    """A descriptor of the file *name*, checked before and after it is opened."""
    _check(name, os.stat(name), kind)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        _check(name, os.fstat(fd), kind)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check(name: str, st: os.stat_result, kind: Kind) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused(name, f"{file_type(st.st_mode)}, not a regular file")
    if st.st_size > kind.cap:
        raise Refused(name, f"{st.st_size:,} bytes, more than {kind.what} may hold ({size_text(kind.cap)})")
    if kind.secret:
        problem = secret_problem(st.st_mode)
        if problem is not None:
            raise Refused(name, problem)


def secret_problem(mode: int) -> str | None:
    """Why a secret file of *mode* is not private enough, if it is not: others may not read
    or write it, its group may not write it (reading is allowed: a group of operators)."""
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    what = []
    if mode & stat.S_IROTH:
        what.append("read by others")
    if writers:
        what.append("written by " + " and ".join(writers))
    if not what:
        return None
    return (
        f"it may be {' and '.join(what)} (mode {stat.S_IMODE(mode):04o}): "
        "chmod 600 it (or 640 to let its group read it)"
    )


def file_type(mode: int) -> str:
    """What a file of *mode* is, in words (``a FIFO``)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "a special file"


def size_text(size: int) -> str:
    """*size* bytes for a message: ``8 KiB``, ``1.5 GiB``, ``100 bytes``."""
    for unit, name in ((1 << 30, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if size >= unit:
            return f"{size / unit:.3g} {name}"
    return f"{size} bytes"
