"""Byte counters of the gradient study: logical bytes per rank per update, and whole-host interface
counters from /proc/net/dev.

The decision to know: these are two different quantities, reported side by side. Logical bytes are
what this rank hands to collectives (gradient reduction and overhead, `ring_wire_bytes` for the
wire estimate); interface counters see everything the host sends, headers and other processes
included, with loopback reported apart.
Details: the notes below.

Notes: what each count includes.

Upstream PowerSGD figures count only the compressed gradient after warm-up; `LogicalTraffic.summary` gives that and
also the totals with warm-up and overhead (loss-part sums every update, exchanges at commits), which cross the wire
too. A ring all-reduce over w ranks sends about 2 (w - 1) / w times the logical bytes per rank: with two, exactly
them. Interface counters include other processes and headers; two workers on one host talk over `lo`, which is
therefore reported apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kit.record import BYTES, Record, spec_field

PROC_NET_DEV = "/proc/net/dev"
LOOPBACK = "lo"


def ring_wire_bytes(logical_bytes: int, world: int) -> int:
    """Bytes one rank sends on the wire for a ring all-reduce of `logical_bytes` over `world` ranks."""
    if world <= 1:
        return 0
    return (2 * (world - 1) * logical_bytes) // world


def read_interface_counters(path: str = PROC_NET_DEV) -> dict[str, dict[str, int]]:
    """{interface: {"rx_bytes", "tx_bytes"}} from a /proc/net/dev file (two header lines, then
    `name: rx_bytes rx_packets ... (8 receive fields) tx_bytes ...`)."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: interface counters are not available on this host") from None
    out = {}
    for lineno, line in enumerate(lines[2:], start=3):
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16:
            raise ValueError(f"{path}:{lineno}: expected 'iface: 16 counters', got {line!r}")
        try:
            out[name.strip()] = {"rx_bytes": int(fields[0]), "tx_bytes": int(fields[8])}
        except ValueError:
            raise ValueError(f"{path}:{lineno}: counters are not integers: {line!r}") from None
    return out


def interface_counters_or_none() -> dict[str, dict[str, int]] | None:
    """This host's interface counters, or None where /proc/net/dev cannot be read (not Linux)."""
    try:
        return read_interface_counters()
    except (FileNotFoundError, ValueError):
        return None


def counter_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict:
    """Per-interface deltas plus totals for loopback and for every other interface.

    An interface present only on one side is left out (it appeared or vanished during the arm); a
    counter that went down (wrapped or reset) is reported as None rather than as a negative number.
    """
    per = {}
    for name in sorted(set(before) & set(after)):
        d = {k: after[name][k] - before[name][k] for k in ("rx_bytes", "tx_bytes")}
        per[name] = {k: (v if v >= 0 else None) for k, v in d.items()}

    def total(names):
        vals = [per[n] for n in names]
        return {k: (None if any(v[k] is None for v in vals) else sum(v[k] for v in vals))
                for k in ("rx_bytes", "tx_bytes")}

    return {"interfaces": per, "loopback": total([n for n in per if n == LOOPBACK]),
            "non_loopback": total([n for n in per if n != LOOPBACK])}


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateTraffic(Record):
    """One update's logical bytes of one rank (an entry of the study's per-update traffic)."""

    step: int = spec_field(int, doc="the update")
    warmup: bool = spec_field(bool, doc="a dense warm-up update of the compressor")
    gradient_bytes: int = spec_field(BYTES, doc="gradient bytes sent to collectives")
    overhead_bytes: int = spec_field(BYTES, doc="other bytes sent during the update (losses, norms)")
    dense_equivalent_bytes: int = spec_field(BYTES, doc="what a dense all-reduce sends; 0 for one worker")


@dataclass
class LogicalTraffic:
    """Per-update logical bytes one rank sent to collectives; `add_*` during an update, `end_update`
    closes it."""

    world: int
    dense_equivalent_bytes: int  # the whole gradient in FP32: what a dense all-reduce sends
    updates: list[UpdateTraffic] = field(default_factory=list)
    _gradient: int = 0
    _overhead: int = 0
    _warmup: bool = False
    _pending_overhead: int = 0  # overhead between updates (commits): counted apart, per run

    def add_gradient(self, nbytes: int, warmup: bool = False) -> None:
        self._gradient += int(nbytes)
        self._warmup = self._warmup or warmup

    def add_overhead(self, nbytes: int, in_update: bool = True) -> None:
        if in_update:
            self._overhead += int(nbytes)
        else:
            self._pending_overhead += int(nbytes)

    def end_update(self, step: int) -> dict:
        """Close the update; its record's JSON (the study keeps it per update)."""
        record = UpdateTraffic(step=step, warmup=self._warmup, gradient_bytes=self._gradient,
                               overhead_bytes=self._overhead,
                               dense_equivalent_bytes=self.dense_equivalent_bytes if self.world > 1 else 0)
        self.updates.append(record)
        self._gradient, self._overhead, self._warmup = 0, 0, False
        return record.to_json()

    def summary(self) -> dict:
        """Totals and per-update means: all updates with overhead, and after warm-up without it."""
        ups = self.updates
        after = [u for u in ups if not u.warmup]
        grad_all = sum(u.gradient_bytes for u in ups)
        over_all = sum(u.overhead_bytes for u in ups)
        grad_after = sum(u.gradient_bytes for u in after)
        dense_after = sum(u.dense_equivalent_bytes for u in after)
        dense_all = sum(u.dense_equivalent_bytes for u in ups)
        sent_all = grad_all + over_all + self._pending_overhead

        def mean(total, n):
            return total / n if n else None

        return {
            "world": self.world,
            "updates": len(ups),
            "warmup_updates": len(ups) - len(after),
            "dense_equivalent_bytes_per_update": self.dense_equivalent_bytes if self.world > 1 else 0,
            "gradient_bytes_total": grad_all,
            "overhead_bytes_in_updates_total": over_all,
            "overhead_bytes_between_updates_total": self._pending_overhead,
            "sent_bytes_total": sent_all,
            "sent_bytes_per_update_with_warmup_and_overhead": mean(sent_all, len(ups)),
            "gradient_bytes_per_update_after_warmup": mean(grad_after, len(after)),
            "compression_ratio_after_warmup": (dense_after / grad_after) if grad_after else None,
            "compression_ratio_with_warmup_and_overhead": (dense_all / sent_all) if sent_all else None,
            "ring_wire_bytes_total_estimate": ring_wire_bytes(sent_all, self.world),
        }
