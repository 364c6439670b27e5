"""Two emulated hosts on one Linux machine: two network namespaces joined by a veth pair, the link
shaped with `tc tbf` in both directions (the commands are in docs/study.md, "The emulated cross-zone
link"). Needs root and iproute2 (`ip netns`, `tc`).

Bandwidth is emulated (each direction of the veth capped at the rate); latency is NOT: this kernel has no
`netem`, and tbf's `latency` only bounds its queue, so a projection adds the round trip as a term. The
file system is not isolated either: "nothing shared on disk" is the callers' discipline (each rank gets
its own directory and is told only that path). Used by the netns benchmarks and tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from kit.distributed.traffic import read_interface_counters


def available() -> str | None:
    """Why two namespaces cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "not root: network namespaces and tc need CAP_NET_ADMIN"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (`ip`, `tc`) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip()}"
    return None


def _sh(*argv: str) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def burst_for(rate_bit: int) -> int:
    """tbf bucket in bytes: at least 10 ms of the rate and at least 64 KiB (veth GSO segments)."""
    return max(64 * 1024, rate_bit // 8 // 100)


@dataclass
class Link:
    """Two namespaces `<tag>a` / `<tag>b` with veth ends `<tag>0` / `<tag>1` and addresses 10.<net>.0.1/2."""

    tag: str = "kxh"
    net: int = 231
    commands: list[str] = field(default_factory=list)

    @property
    def ns(self) -> tuple[str, str]:
        return f"{self.tag}a", f"{self.tag}b"

    @property
    def dev(self) -> tuple[str, str]:
        return f"{self.tag}0", f"{self.tag}1"

    @property
    def addr(self) -> tuple[str, str]:
        return f"10.{self.net}.0.1", f"10.{self.net}.0.2"

    def _run(self, *argv: str) -> str:
        self.commands.append(" ".join(argv))
        return _sh(*argv)

    def create(self) -> Link:
        self.delete()
        (na, nb), (da, db), (aa, ab) = self.ns, self.dev, self.addr
        self._run("ip", "netns", "add", na)
        self._run("ip", "netns", "add", nb)
        self._run("ip", "link", "add", da, "type", "veth", "peer", "name", db)
        for ns, dev, addr in ((na, da, aa), (nb, db, ab)):
            self._run("ip", "link", "set", dev, "netns", ns)
            self._run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            self._run("ip", "-n", ns, "link", "set", dev, "up")
            self._run("ip", "-n", ns, "link", "set", "lo", "up")
        return self

    def shape(self, rate_bit: int, latency_ms: int = 200) -> dict:
        """Cap each direction at `rate_bit` bits/s with tbf; returns the qdisc settings."""
        burst = burst_for(rate_bit)
        for ns, dev in zip(self.ns, self.dev):
            self._run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                      "rate", f"{rate_bit}bit", "burst", str(burst), "latency", f"{latency_ms}ms")
        return {"qdisc": "tbf", "rate_bit_per_s": rate_bit, "burst_bytes": burst, "queue_latency_ms": latency_ms,
                "directions": "both (root qdisc on each veth end)", "propagation_latency": "not emulated (no netem)"}

    def qdisc_stats(self) -> dict:
        return {ns: _sh("ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", dev).strip()
                for ns, dev in zip(self.ns, self.dev)}

    def counters(self) -> dict:
        """{namespace: {interface: {rx_bytes, tx_bytes}}} read from each namespace's /proc/net/dev."""
        out = {}
        for ns in self.ns:
            text = _sh("ip", "netns", "exec", ns, "cat", "/proc/net/dev")
            path = f"/tmp/.{ns}-{os.getpid()}.netdev"
            with open(path, "w") as f:
                f.write(text)
            try:
                out[ns] = read_interface_counters(path)
            finally:
                os.unlink(path)
        return out

    def exec_argv(self, side: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side], *argv]

    def delete(self) -> None:
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)  # absent is fine
