"""Run the real `dig` and read its YAML output (dig +yaml)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass
class DigResult:
    status: str
    flags: set[str]
    question: list[str]
    answer: list[str]
    authority: list[str]
    additional: list[str]
    edns: dict[str, Any] | None
    protocol: str
    raw: dict[str, Any] = field(repr=False)

    def answer_data(self) -> list[str]:
        """The RDATA of each answer record (the address for A/AAAA)."""
        return [" ".join(line.split()[4:]) for line in self.answer]

    def types(self, section: str = "answer") -> list[str]:
        return [line.split()[3] for line in getattr(self, section)]


def available() -> bool:
    return shutil.which("dig") is not None


def dig(server: str, port: int, name: str, rdtype: str = "A", *args: str, source: str | None = None) -> DigResult:
    """``dig @server -p port name rdtype +norec +yaml ARGS``; raises if dig got no answer."""
    cmd = ["dig", f"@{server}", "-p", str(port), name, rdtype, "+norec", "+yaml", "+tries=1", "+time=3", *args]
    if source:
        cmd[1:1] = ["-b", source]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    text = "\n".join(line for line in out.stdout.splitlines() if not line.startswith(";"))
    docs = [d for d in yaml.safe_load_all(text) if d]
    messages = [m for doc in docs for m in doc if m.get("type") == "MESSAGE"]
    if not messages:
        raise AssertionError(f"dig got no answer: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    message = messages[-1]["message"]
    data = message["response_message_data"]
    opt = data.get("OPT_PSEUDOSECTION", {}).get("EDNS") if data.get("OPT_PSEUDOSECTION") else None
    return DigResult(
        status=data["status"],
        flags=set((data.get("flags") or "").split()),
        question=data.get("QUESTION_SECTION") or [],
        answer=data.get("ANSWER_SECTION") or [],
        authority=data.get("AUTHORITY_SECTION") or [],
        additional=data.get("ADDITIONAL_SECTION") or [],
        edns=opt,
        protocol=message.get("socket_protocol", ""),
        raw=data,
    )
