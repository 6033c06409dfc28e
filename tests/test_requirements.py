"""``constraints-lower.txt`` pins the low end of every range of ``requirements.txt``, so the lower-bounds run
(``scripts/run_tests_lower.sh``; a subset in ``.ci/run``) tests exactly the versions the ranges promise."""
from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def requirements(path: Path) -> dict[str, Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return {canonicalize_name(r.name): r for r in map(Requirement, filter(None, lines))}


def test_every_lower_bound_is_pinned_and_every_pin_is_a_lower_bound():
    declared, pinned = requirements(ROOT / "requirements.txt"), requirements(ROOT / "constraints-lower.txt")
    lower = {name: Version(spec.version) for name, req in declared.items() for spec in req.specifier
             if spec.operator == ">="}
    assert set(pinned) == set(lower), "constraints-lower.txt must pin exactly the requirements with a >= bound"
    for name, req in pinned.items():
        (spec,) = req.specifier
        assert spec.operator == "==" and Version(spec.version) == lower[name], (name, str(req), str(lower[name]))
