"""The shipped scenario carries what the engine benchmark and the forecast quantile need."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.fleet.models import LlmModel
from controlplane.policies.models import Tier
from controlplane.scenarios.services import scenario_load

SCENARIO = Path(__file__).resolve().parents[2] / "docs" / "scenarios" / "support-assistant.yaml"


@pytest.mark.django_db
def test_model_architecture_and_tier_quantile_load() -> None:
    scenario_load(path=SCENARIO)
    model = LlmModel.objects.get(name="chat-70b")
    assert (model.hidden_size, model.intermediate_size) == (8192, 28672)
    assert (model.attention_heads, model.vocab_size) == (64, 128256)
    assert Tier.objects.get(name="premium").forecast_quantile == 0.95
    assert Tier.objects.get(name="standard").forecast_quantile == 0.9  # the default


@pytest.mark.django_db
def test_a_bad_forecast_quantile_names_the_entry(tmp_path: Path) -> None:
    text = SCENARIO.read_text().replace("forecast_quantile: 0.95", "forecast_quantile: 1.5")
    broken = tmp_path / "broken.yaml"
    broken.write_text(text)
    with pytest.raises(Exception, match=r"tiers\[0\] \(premium\).*forecast_quantile"):
        scenario_load(path=broken)
