import dataclasses

import pytest

from simreal_ros import config_schema
from simreal_ros.stats import percentile, wilson_interval


@dataclasses.dataclass
class ExampleConfig:
    rate_hz: float = config_schema.setting(100.0, "control rate", low=1.0, high=1000.0)
    mode: str = config_schema.setting("lockstep", "mode", choices=("lockstep", "free"))
    names: list = config_schema.setting(["a"], "names")


def test_from_mapping_accepts_valid_values_and_coerces_ints_to_float():
    config = config_schema.from_mapping(ExampleConfig, {"rate_hz": 50, "mode": "free"})
    assert config.rate_hz == 50.0 and isinstance(config.rate_hz, float)
    assert config.mode == "free"


def test_list_defaults_are_not_shared_between_instances():
    first, second = ExampleConfig(), ExampleConfig()
    first.names.append("b")
    assert second.names == ["a"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rate_hz": 0.5}, "rate_hz = 0.5 is below its minimum 1.0"),
        ({"rate_hz": 5000.0}, "above its maximum 1000.0"),
        ({"rate_hz": float("nan")}, "is not finite"),
        ({"mode": "turbo"}, "is not one of lockstep, free"),
        ({"rat_hz": 1.0}, "unknown ExampleConfig setting(s): rat_hz"),
    ],
)
def test_invalid_values_are_refused_with_the_field_named(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_schema.from_mapping(ExampleConfig, values)


@dataclasses.dataclass
class ScreenGroup:
    seeds: int = config_schema.setting(20, "episodes", low=1, high=100, formerly="screen_seeds")
    profile: str = config_schema.setting("nominal", "profile", formerly="screen_profile")


@dataclasses.dataclass
class GroupedConfig:
    rate_hz: float = config_schema.setting(100.0, "control rate", low=1.0, high=1000.0)
    screen: ScreenGroup = config_schema.group(ScreenGroup, "screening")


def test_a_group_is_named_with_dots_and_given_flat_or_nested():
    assert list(config_schema.settings(GroupedConfig)) == [
        "rate_hz", "screen.seeds", "screen.profile"
    ]  # fmt: skip
    dotted = config_schema.from_mapping(GroupedConfig, {"screen.seeds": 5, "rate_hz": 2})
    nested = config_schema.from_mapping(GroupedConfig, {"screen": {"seeds": 5}, "rate_hz": 2})
    assert dotted == nested and dotted.screen.seeds == 5 and dotted.screen.profile == "nominal"
    assert config_schema.values_of(dotted)["screen.seeds"] == 5
    changed = config_schema.updated(dotted, {"screen.profile": "randomized"})
    assert (changed.screen.profile, changed.screen.seeds, dotted.screen.profile) == (
        "randomized", 5, "nominal"
    )  # fmt: skip
    assert GroupedConfig().screen is not GroupedConfig().screen  # no shared group instance


def test_a_grouped_setting_is_validated_and_an_old_name_gets_its_new_one():
    with pytest.raises(ValueError, match=r"GroupedConfig\.screen\.seeds = 0 is below"):
        config_schema.from_mapping(GroupedConfig, {"screen": {"seeds": 0}})
    with pytest.raises(ValueError, match=r"screen_seeds is now screen\.seeds"):
        config_schema.from_mapping(GroupedConfig, {"screen_seeds": 3})
    with pytest.raises(ValueError, match=r"unknown GroupedConfig setting\(s\): screen\.seed\b"):
        config_schema.from_mapping(GroupedConfig, {"screen.seed": 3})
    with pytest.raises(AttributeError):
        config_schema.shared_setting(GroupedConfig, "screen_seeds", 1)


def test_wilson_interval_matches_reference_values():
    # Reference: 8/10 -> (0.4902, 0.9433) from the Wilson score formula.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3)
    assert high == pytest.approx(0.9433, abs=1e-3)
    # The ends are exact and every interval holds its rate, also at counts where floating
    # point rounding would put an end past the rate (e.g. 0/69, 4/4).
    for trials in range(1, 130):
        assert wilson_interval(0, trials)[0] == 0.0
        assert wilson_interval(trials, trials)[1] == 1.0
        for successes in (0, 1, trials // 2, trials - 1, trials):
            low, high = wilson_interval(successes, trials)
            assert 0.0 <= low <= successes / trials <= high <= 1.0, (successes, trials)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
