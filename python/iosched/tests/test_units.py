import pytest

from iosched.errors import SpecError
from iosched.units import Percent, parse_cpu_list, parse_size, parse_time


@pytest.mark.parametrize("text,expected", [
    ("4k", 4096), ("4K", 4096), ("4kb", 4096), ("4KiB", 4096), ("1m", 1 << 20), ("1MiB", 1 << 20),
    ("2g", 2 << 30), ("1T", 1 << 40), ("512", 512), (" 8 k ", 8192), ("1.5k", 1536), (4096, 4096), ("0", 0),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_percent():
    v = parse_size("50%", allow_percent=True)
    assert isinstance(v, Percent) and v == 50.0


@pytest.mark.parametrize("bad", ["4x", "k", "", "-1", "50%", "1.1", True, 1.5, "4 kk"])
def test_bad_sizes(bad):
    with pytest.raises(SpecError) as e:
        parse_size(bad, file="spec.toml", key="bs")
    assert str(e.value).startswith("spec.toml: bs: expected a size")


@pytest.mark.parametrize("text,unit,ns", [
    ("2s", "s", 2_000_000_000), ("200ms", "s", 200_000_000), ("200msec", "s", 200_000_000), ("5", "s", 5 * 10**9),
    (5, "s", 5 * 10**9), (0.5, "s", 500_000_000), ("10", "us", 10_000), ("10us", "s", 10_000),
    ("10usec", "s", 10_000), ("7ns", "s", 7), ("1m", "s", 60 * 10**9), ("2min", "s", 120 * 10**9),
    ("1h", "s", 3600 * 10**9), ("1.5s", "s", 1_500_000_000), ("3sec", "s", 3 * 10**9),
])
def test_times(text, unit, ns):
    assert parse_time(text, default_unit=unit) == ns


@pytest.mark.parametrize("bad", ["2 parsecs", "s", "", "-1s", -1, True, [1]])
def test_bad_times(bad):
    with pytest.raises(SpecError) as e:
        parse_time(bad, file="f", key="duration")
    assert "duration: expected a time" in str(e.value)


def test_cpu_list():
    assert parse_cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_cpu_list("5") == [5]
    assert parse_cpu_list(7) == [7]
    assert parse_cpu_list("3,1,1-2") == [1, 2, 3]
    for bad in ["", "a", "3-1", "1,,2"]:
        with pytest.raises(SpecError):
            parse_cpu_list(bad)


try:
    from hypothesis import given, strategies as st

    @given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "k", "m", "g"]))
    def test_size_roundtrip(n, suffix):
        mult = {"": 1, "k": 1024, "m": 1 << 20, "g": 1 << 30}[suffix]
        assert parse_size(f"{n}{suffix}") == n * mult
        assert parse_size(f"{n}{suffix.upper()}") == n * mult

    @given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["ns", "us", "ms", "s"]))
    def test_time_roundtrip(n, unit):
        mult = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}[unit]
        assert parse_time(f"{n}{unit}") == n * mult
except ImportError:  # pragma: no cover
    pass
