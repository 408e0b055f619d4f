"""The audit's vocabulary: a ``Link`` of the chain with its status, and the ``CELL`` selection of one
run/sampler pair, metric or seed (``parse_cell``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

OK = "ok"
MISSING = "MISSING"
CHANGED = "HASH CHANGED"
NOT_RECORDED = "NOT RECORDED"  # the parent records no hash for it: the link cannot be verified
BROKEN = "BROKEN"              # present but unreadable, incomplete or contradicting its parent
NAMED = "named"                # a hub model named without local files: nothing to hash, not a failure
OK_STATUSES = (OK, NAMED)


class AuditError(ValueError):
    """The starting point cannot be traced at all (not found, no sidecar, unknown file, bad CELL)."""


@dataclass
class Link:
    """One artifact of the chain: where it is, its hash now, what its parent recorded, its status."""
    kind: str
    path: str
    status: str = OK
    sha256: str | None = None      # the hash now: file sha256, config hash, store identity, fingerprint
    recorded: str | None = None    # the hash the parent recorded
    named_by: str | None = None    # the parent's path
    info: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    repeated: bool = False         # verified again, expanded above
    children: list["Link"] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    def fail(self, status: str, problem: str) -> None:
        """Record a problem; the first failing status stays the link's status."""
        if self.ok:
            self.status = status
        self.problems.append(problem)

    def walk(self) -> Iterator["Link"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def broken(self) -> list["Link"]:
        """The failing links, each artifact once, in tree order."""
        seen, out = set(), []
        for link in self.walk():
            key = (link.kind, link.path, link.status, tuple(link.problems))
            if not link.ok and key not in seen:
                seen.add(key)
                out.append(link)
        return out

    @property
    def complete(self) -> bool:
        return not self.broken()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "status": self.status, "sha256": self.sha256,
                "recorded_sha256": self.recorded, "named_by": self.named_by, "info": self.info,
                "problems": self.problems, "repeated": self.repeated,
                "children": [c.to_dict() for c in self.children]}


# --------------------------------------------------------------------------------------------------
# CELL: which run/sampler pair, metric or seed to follow
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    runs: frozenset = frozenset()
    samplers: frozenset = frozenset()
    metrics: frozenset = frozenset()
    seeds: frozenset = frozenset()

    @property
    def narrows_pairs(self) -> bool:
        return bool(self.runs or self.samplers)

    def wants_pair(self, run: Any, sampler: Any) -> bool:
        return ((not self.runs or str(run) in self.runs)
                and (not self.samplers or str(sampler) in self.samplers))

    def wants_seed(self, seed: Any) -> bool:
        return not self.seeds or seed is None or str(seed) in self.seeds


def _seed_token(token: str) -> str | None:
    for prefix in ("seed=", "seed:", "seed"):
        if token.startswith(prefix) and token[len(prefix):].isdigit():
            return token[len(prefix):]
    return token if token.isdigit() else None


def parse_cell(cell: str | None, names: dict[str, set]) -> Selection:
    """Split ``cell`` on "/" and classify each part as a run, sampler, metric or seed among ``names``
    (keys runs, samplers, metrics, seeds: what the starting file refers to)."""
    if not cell:
        return Selection()
    picked: dict[str, set] = {"runs": set(), "samplers": set(), "metrics": set(), "seeds": set()}
    for token in filter(None, cell.split("/")):
        seed = _seed_token(token)
        matched = [key for key in ("runs", "samplers", "metrics") if token in names.get(key, ())]
        if seed is not None and seed in names.get("seeds", ()):
            matched.append("seeds")
            token = seed
        if not matched:
            known = "; ".join(f"{k}: {', '.join(sorted(map(str, v))) or '-'}" for k, v in names.items())
            raise AuditError(f"CELL part {token!r} names no run, sampler, metric or seed here ({known})")
        for key in matched:
            picked[key].add(token)
    return Selection(**{k: frozenset(v) for k, v in picked.items()})
