"""Every shipped config validates against the schema, with the schema's defaults filled in."""

from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_config_validates(path):
    config = yaml.safe_load(path.read_text())
    validate(config, str(SCHEMA))
    for model in config["models"].values():
        assert model["dtype"] in ("float32", "bfloat16") and "trust_remote_code" in model
    for dataset in config["datasets"].values():
        assert dataset["normalization"] == "published"


def test_schema_rejects_unknown_recipe():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["datasets"]["demo_centered"]["recipe"] = "centred"
    with pytest.raises(Exception, match="centred"):
        validate(config, str(SCHEMA))
