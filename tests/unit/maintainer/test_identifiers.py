"""Identifiers, string literals and partition filters: what may reach SQL, and in what form."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.identifiers import (
    Comparison,
    IsNull,
    MalformedFilterError,
    MalformedIdentifierError,
    PartitionFilter,
    TableId,
    parse_filter,
    parse_table,
    quote_identifier,
    sql_string,
)

pytestmark = pytest.mark.unit

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
keywords = {"and", "is", "not", "null", "true", "false"}
columns = names.filter(lambda n: n.lower() not in keywords)
plain_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="'\\"), max_size=20
)
values = st.one_of(plain_text, st.integers(-(10**17), 10**17), st.booleans())
ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
terms = st.one_of(
    st.builds(Comparison, columns, ops, values), st.builds(IsNull, columns, st.booleans())
)
filters = st.lists(terms, min_size=1, max_size=4).map(lambda ts: PartitionFilter(tuple(ts)))


@given(names, names)
def test_valid_table_identifiers_round_trip(namespace: str, name: str) -> None:
    table = parse_table(f"{namespace}.{name}")
    assert table == TableId(namespace, name)
    assert str(table) == f"{namespace}.{name}"
    assert table.quoted("icefjord") == f"`icefjord`.`{namespace}`.`{name}`"


@pytest.mark.parametrize(
    "text",
    [
        "orders",
        "a.b.c",
        "1ns.orders",
        "ns.orders;",
        "ns.`orders`",
        "ns.orders--",
        "ns.ord ers",
        "ns.orders' OR '1'='1",
        "ns.",
        ".orders",
        "",
        "ns.ördérs",
        "ns.orders\n",
    ],
)
def test_malformed_table_identifiers_are_refused(text: str) -> None:
    with pytest.raises(MalformedIdentifierError):
        parse_table(text)


@given(st.text(max_size=30))
def test_anything_outside_the_pattern_is_refused(text: str) -> None:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", text):
        assert str(parse_table(text)) == text
    else:
        with pytest.raises(MalformedIdentifierError):
            parse_table(text)


@pytest.mark.parametrize("name", ["a`b", "a b", "", "x;y", "9lives"])
def test_quote_identifier_refuses_non_names(name: str) -> None:
    with pytest.raises(MalformedIdentifierError):
        quote_identifier(name)


def _unescape(literal: str) -> str:
    """Read a Spark SQL single-quoted literal the way Spark's parser does (backslash escapes)."""
    assert literal[0] == literal[-1] == "'"
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append(body[i + 1])
            i += 2
        else:
            assert body[i] != "'", "an unescaped quote would end the literal early"
            out.append(body[i])
            i += 1
    return "".join(out)


@given(st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40))
def test_sql_string_holds_its_text_exactly(text: str) -> None:
    assert _unescape(sql_string(text)) == text


@pytest.mark.parametrize("text", ["a\nb", "x\x00", "tab\there", "del\x7f"])
def test_sql_string_refuses_control_characters(text: str) -> None:
    with pytest.raises(ValueError):
        sql_string(text)


def test_filter_examples() -> None:
    assert parse_filter("region = 'eu'") == PartitionFilter((Comparison("region", "=", "eu"),))
    parsed = parse_filter("day >= 3 and region IS NOT NULL AND flag = TRUE and x is null")
    assert parsed.terms == (
        Comparison("day", ">=", 3),
        IsNull("region", negated=True),
        Comparison("flag", "=", True),
        IsNull("x"),
    )
    assert parsed.columns == {"day", "region", "flag", "x"}
    assert parsed.render() == "day >= 3 AND region IS NOT NULL AND flag = true AND x IS NULL"
    assert parsed.render(quoted=True).startswith("`day` >= 3 AND `region` IS NOT NULL")


@given(filters)
def test_filters_round_trip_through_their_canonical_text(partition: PartitionFilter) -> None:
    assert parse_filter(partition.render()) == partition


@pytest.mark.parametrize(
    "text",
    [
        "region = 'eu' OR 1 = 1",
        "region = 'eu'; DROP TABLE x",
        "region = 'eu' -- comment",
        "region = 'e''u'",
        "region = 'e\\'u'",
        "(region = 'eu')",
        "lower(region) = 'eu'",
        "region = eu",
        "region = 'eu' AND",
        "region",
        "region IS",
        "region IS NOT 'x'",
        "= 'eu'",
        "and = 1",
        "x = 1.5",
        "x = 1e3",
        "region = 'eu' region = 'us'",
        'region = "eu"',
        "region = 'eu' /* */",
        "x = 'a\nb'",
        "",
    ],
)
def test_filters_outside_the_grammar_are_refused(text: str) -> None:
    with pytest.raises(MalformedFilterError):
        parse_filter(text)


def test_overlong_filters_are_refused() -> None:
    with pytest.raises(MalformedFilterError):
        parse_filter(" AND ".join(["x = 1"] * 300))
