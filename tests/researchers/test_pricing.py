"""The price table: arithmetic, aliases, the long-prompt tier, and the safe fallback."""
import pytest

from agent.researchers import pricing
from agent.researchers.settings import DEFAULT_CLAUDE_MODEL as DEFAULT_MODEL

MILLION = 1_000_000


def test_the_default_model_has_a_price():
    assert pricing.lookup(DEFAULT_MODEL) is not None


def test_each_kind_of_token_is_priced_at_its_own_rate():
    model = "claude-sonnet-5-5"
    assert pricing.cost_usd(model, MILLION, 0) == pytest.approx(2.0)
    assert pricing.cost_usd(model, 0, MILLION) == pytest.approx(10.0)
    assert pricing.cost_usd(model, 0, 0, cache_read_input_tokens=MILLION) == pytest.approx(0.20)
    assert pricing.cost_usd(model, 0, 0, cache_creation_input_tokens=MILLION) == pytest.approx(2.50)
    assert pricing.cost_usd(model, 1000, 500, 20_000, 3000) == pytest.approx(
        (1000 * 2.0 + 500 * 10.0 + 20_000 * 0.20 + 3000 * 2.50) / MILLION)


@pytest.mark.parametrize("model, alias", [
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-opus-4-5-20251101", "claude-opus-4-5"),
    ("claude-sonnet-5-5[1m]", "claude-sonnet-5-5"),
])
def test_dated_snapshots_and_variants_cost_what_their_alias_costs(model, alias):
    assert pricing.lookup(model) == pricing.PRICES[alias]


def test_an_unknown_model_is_priced_at_the_dearest_rates_so_caps_stop_early():
    usage = (50_000, 4000, 100_000, 10_000)
    assert pricing.lookup("claude-unknown-9") is None
    unknown = pricing.cost_usd("claude-unknown-9", *usage)
    assert all(unknown >= price.cost_usd(*usage) for price in pricing.PRICES.values())


def test_haiku_5_5_switches_every_rate_above_a_100k_token_prompt():
    short = pricing.cost_usd("claude-haiku-5-5", 100_000, MILLION)
    long = pricing.cost_usd("claude-haiku-5-5", 60_000, MILLION, cache_read_input_tokens=40_001)
    assert short == pytest.approx((100_000 * 0.10 + MILLION * 0.50) / MILLION)
    assert long == pytest.approx((60_000 * 0.50 + MILLION * 2.50 + 40_001 * 0.05) / MILLION)


@pytest.mark.parametrize("model", sorted(pricing.PRICES))
def test_every_entry_is_shaped_like_a_cache_price(model):
    """Catches typos: a cache write costs more than input, a cache read less, output most."""
    price = pricing.PRICES[model]
    assert 0 < price.cache_read < price.input < price.cache_write < price.cache_write_1h <= price.output


def test_one_hour_cache_writes_cost_twice_the_input_rate():
    model = "claude-sonnet-5-5"
    assert pricing.cost_usd(model, 0, 0, cache_creation_input_tokens=MILLION,
                            cache_creation_1h_input_tokens=MILLION) == pytest.approx(4.0)
    mixed = pricing.cost_usd(model, 0, 0, cache_creation_input_tokens=MILLION,
                             cache_creation_1h_input_tokens=MILLION // 4)
    assert mixed == pytest.approx(0.75 * 2.50 + 0.25 * 4.0)


@pytest.mark.parametrize("model", ["us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                                   "anthropic.claude-sonnet-4-5-v1:0", "claude-sonnet-4-5@20250929"])
def test_bedrock_and_vertex_ids_cost_what_their_alias_costs(model):
    assert pricing.lookup(model) == pricing.PRICES["claude-sonnet-4-5"]


def test_a_price_from_program_md_bills_cache_hits_at_its_cached_rate():
    price = pricing.ModelPrice.of(input=1.0, output=2.0, cached_input=0.25)
    assert price.cost_usd(MILLION, MILLION, cache_read_input_tokens=MILLION) == pytest.approx(3.25)
    assert pricing.ModelPrice.of(1.0, 2.0).cache_read == 1.0
    assert pricing.FREE.cost_usd(MILLION, MILLION, MILLION, MILLION) == 0.0
