"""docs/attribution.md and docs/validation.md say what the code does: the calibrated constants and thresholds, and the
validation's figures, recomputed."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("validate_attribution", ROOT / "benchmarks/validate_attribution.py")
validate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(validate)


def _constants(sql: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"(NULL|[-0-9.e]+)::\w+ AS (\w+)", sql)}


def test_attribution_doc_tables_hold_the_sql_constants():
    doc = (ROOT / "docs/attribution.md").read_text()
    values = {**_constants((ROOT / "queries/_calibration.sql").read_text()),
              **_constants((ROOT / "queries/_thresholds.sql").read_text())}
    for name, value in values.items():
        if name == "calibration_rows" or value == "NULL":
            continue
        assert re.search(rf"\| `{name}` \| {re.escape(format(float(value), 'g'))} \|", doc), (name, value)


def test_validation_doc_is_what_the_code_gives(tmp_path):
    doc = (ROOT / "docs/validation.md").read_text()
    for name, rows in validate.judged_sets(validate.attributor(tmp_path)).items():
        assert validate.summary(f"{name.capitalize()} set", rows) in doc, name


def test_calibration_is_fitted_on_the_calibration_set_alone(tmp_path):
    """Refitting the constants from the calibration rows gives the committed ones (so nothing else went into them)."""
    rows = validate.known_cause_rows(validate.attributor(tmp_path), validate.CALIBRATION)
    committed = _constants((ROOT / "queries/_calibration.sql").read_text())
    kappa = float(committed["cache_in_overlap"])
    fitted = validate.calibrate(rows, kappa)
    for name, value in fitted.items():
        if name == "cache_in_overlap":
            continue
        expected = committed[name]
        if value is None:
            assert expected == "NULL", name
        else:
            assert float(expected) == round(value, 6), name
    assert abs(validate.calibrate(rows)["cache_in_overlap"] - kappa) < 1e-3


def test_training_coverage_in_the_doc_is_what_the_code_gives(tmp_path):
    """docs/validation.md's coverage table of the real training runs is the one the committed traces give."""
    doc = (ROOT / "docs/validation.md").read_text()
    assert validate.coverage_table(validate.coverage_rows(tmp_path)) in doc
