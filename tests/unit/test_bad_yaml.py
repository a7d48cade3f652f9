"""Bad YAML: syntax, duplicate keys, aliases, tags and values read by the YAML 1.2 core schema."""

from __future__ import annotations

import time

import pytest
from helpers_bad_input import ROOT, SOURCE, check

from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_text
from analyzer.diagram.graph import compile_data


@pytest.mark.parametrize("text", [
    "name: attention\nlevels: [gmem, smem\naxes: {}\n",      # unclosed flow sequence
    "name: attention\n  levels: [gmem]\n axes: {}\n",         # bad indentation
    "name: 'attention\n",                                     # unclosed quote
    "name: attention\n\tlevels: [gmem, smem]\n",              # tab indentation
])
def test_invalid_yaml_names_file_and_line(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    err = info.value
    line = check(err, field=None, says=("invalid YAML",))
    assert err.field is not None and err.field.startswith("line "), line
    assert "column" in err.field, line


def test_yaml_aliases_are_rejected():
    text = "axes:\n  q: &size {default: 16}\n  x: *size\n"
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    err = info.value
    check(err, field="line 2, column 6", says=("invalid YAML", "aliases", "&size"))   # the anchor, first


def test_yaml_alias_bomb_is_rejected_quickly():
    rows = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    rows += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    start = time.perf_counter()
    with pytest.raises(NapkinError) as info:
        load_text("\n".join(rows) + "\n", source=SOURCE)
    assert time.perf_counter() - start < 1.0
    check(info.value, field="line 1, column 4", says=("aliases",))


@pytest.mark.parametrize("text, field, key", [
    ("name: a\nlevels: [gmem, smem]\nname: b\n", "line 3, column 1", "name"),
    ("axes:\n  q: {default: 16}\n  d: {}\n  q: {default: 32}\n", "line 4, column 3", "q"),
    ("ops:\n  - name: S\n    over: d\n    over: x\n", "line 4, column 5", "over"),
])
def test_duplicate_keys_are_rejected(text, field, key):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=field, says=("invalid YAML", f"duplicate key {key!r}"))


def test_yaml_integer_too_long_to_convert():
    with pytest.raises(NapkinError) as info:
        load_text("axes:\n  q: {default: " + "9" * 5000 + "}\n", source=SOURCE)
    check(info.value, field=None, says=("invalid YAML",))


def test_yaml_nested_too_deeply():
    with pytest.raises(NapkinError) as info:
        load_text("[" * 5000 + "]" * 5000, source=SOURCE)
    check(info.value, field=None, says=("nested too deeply",))


@pytest.mark.parametrize("text", ["? [a, b]\n: 1\n", "? {a: 1}\n: 1\n"])
def test_yaml_mapping_key_that_is_not_plain(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field="line 1, column 3", says=("not a plain value",))


# regression: YAML 1.1 read `0100` as 64 (octal) and `1:30` as 90 (sexagesimal); an anchor with no
# alias, !!set (its order follows the hash seed), !!binary and every other tag were taken.
@pytest.mark.parametrize("text, value", [
    ("0100", 100), ("1:30", "1:30"), ("12:30:00", "12:30:00"), ("yes", "yes"), ("no", "no"),
    ("on", "on"), ("off", "off"), ("Yes", "Yes"), ("2026-11-24", "2026-11-24"), ("1_000", "1_000"),
    ("0b101", "0b101"), ("=", "="), ("0o17", 15), ("0x1F", 31), ("1.98e9", 1.98e9), ("2e12", 2e12),
    ("-0.5", -0.5), (".5", 0.5), ("+3", 3), ("true", True), ("FALSE", False), ("~", None), ("null", None),
    ("'0100'", "0100"), ("!!str 0100", "0100"), ("!!int '12'", 12), ("!!float 3", 3.0),
])
def test_yaml_values_are_read_by_the_yaml_1_2_core_schema(text, value):
    assert load_text(f"a: {text}\n", source=SOURCE) == {"a": value}


def test_yaml_merge_key_is_a_plain_key():
    assert load_text("<<: {b: 1}\n", source=SOURCE) == {"<<": {"b": 1}}


@pytest.mark.parametrize("text, field, tag", [
    ("a: !!set {x, y}\n", "line 1, column 4", "!!set"),
    ("a: !!binary aGk=\n", "line 1, column 4", "!!binary"),
    ("a: !!timestamp 2026-11-24\n", "line 1, column 4", "!!timestamp"),
    ("a: !!omap [b: 1]\n", "line 1, column 4", "!!omap"),
    ("a: !custom 3\n", "line 1, column 4", "!custom"),
    ("a:\n  - 1\n  - !!python/tuple [1, 2]\n", "line 3, column 5", "!!python/tuple"),
    ("? !!set {x}\n: 1\n", "line 1, column 3", "!!set"),
])
def test_yaml_tags_other_than_the_core_ones_are_rejected(text, field, tag):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=field, says=("invalid YAML", f"the tag {tag} is not supported"),
          hint="YAML 1.2")


@pytest.mark.parametrize("text", ["a: &x 3\n", "a: &x {b: 1}\n", "a: [&x 1]\n"])
def test_yaml_anchor_without_alias_is_rejected(text):
    with pytest.raises(NapkinError) as info:
        load_text(text, source=SOURCE)
    check(info.value, field=None, says=("anchors and aliases (&x)",))


@pytest.mark.parametrize("text, says", [("!!bool yes", "'yes' is not a bool"),
                                        ("!!int 1.5", "'1.5' is not an int"),
                                        ("!!null 0", "'0' is not a null")])
def test_yaml_core_tag_on_a_value_it_does_not_fit(text, says):
    with pytest.raises(NapkinError) as info:
        load_text(f"a: {text}\n", source=SOURCE)
    check(info.value, field="line 1, column 4", says=(says,))


def test_yaml_sizes_in_a_diagram_are_what_they_look_like():
    """A default of 0100 is 100 values, not 64 (YAML 1.1's octal): the analysis sees the size as written."""
    text = (ROOT / "diagrams" / "matmul.yaml").read_text()
    data = load_text(text.replace("default: 8192", "default: 0100", 1), source=SOURCE)
    assert data["axes"]["a"]["default"] == 100
    diagram = compile_data(data, source=SOURCE)
    assert {s.name: v for s, v in diagram.defaults.items()}["a"] == 100


def test_yaml_python_tags_are_rejected():
    with pytest.raises(NapkinError) as info:
        load_text("name: !!python/object/apply:os.system ['echo hi']\n", source=SOURCE)
    check(info.value, field="line 1, column 7", says=("invalid YAML",))
