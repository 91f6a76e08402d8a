"""The CALL statements: rendered from parsed values, quoted and escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.maintainer.identifiers import PartitionFilter, TableId, parse_filter
from services.maintainer.procedures import (
    expire_snapshots_sql,
    remove_orphan_files_sql,
    rewrite_data_files_sql,
    rewrite_manifests_sql,
    rewrite_position_deletes_sql,
    timestamp_literal,
)

pytestmark = pytest.mark.unit

TABLE = TableId("shop", "orders")


def test_rewrite_data_files_statement() -> None:
    sql = rewrite_data_files_sql(
        "icefjord",
        TABLE,
        parse_filter("region = 'eu'"),
        {"min-input-files": 2, "partial-progress.enabled": True},
    )
    assert sql == (
        "CALL `icefjord`.system.rewrite_data_files(table => '`shop`.`orders`', "
        "strategy => 'binpack', options => map('min-input-files', '2', "
        "'partial-progress.enabled', 'true'), where => '`region` = \\'eu\\'')"
    )


def test_whole_table_rewrites_have_no_where_and_no_empty_map() -> None:
    sql = rewrite_position_deletes_sql("icefjord", TABLE, None, {})
    assert sql == "CALL `icefjord`.system.rewrite_position_delete_files(table => '`shop`.`orders`')"


def test_other_statements() -> None:
    assert expire_snapshots_sql("icefjord", TABLE, 1_714_564_800_250, 5) == (
        "CALL `icefjord`.system.expire_snapshots(table => '`shop`.`orders`', "
        "older_than => TIMESTAMP '2024-05-01 12:00:00.250Z', retain_last => 5)"
    )
    assert remove_orphan_files_sql("icefjord", TABLE, 0, dry_run=True).endswith(
        "older_than => TIMESTAMP '1970-01-01 00:00:00.000Z', dry_run => true, "
        "prefix_listing => true)"
    )
    assert rewrite_manifests_sql("cat", TABLE) == (
        "CALL `cat`.system.rewrite_manifests(table => '`shop`.`orders`', use_caching => false)"
    )
    with pytest.raises(ValueError):
        expire_snapshots_sql("icefjord", TABLE, 0, 0)


@given(st.integers(0, 4_102_444_800_000))
def test_timestamp_literal_is_the_instant(ms: int) -> None:
    literal = timestamp_literal(ms)
    match = re.fullmatch(r"TIMESTAMP '(.+)Z'", literal)
    assert match is not None
    parsed = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
    assert round(parsed.timestamp() * 1000) == ms


def _string_arguments(sql: str) -> list[str]:
    """The single-quoted literals of ``sql``, unescaped; fails on an unterminated one."""
    out, i = [], 0
    while i < len(sql):
        if sql[i] == "'":
            i += 1
            chars = []
            while sql[i] != "'":
                if sql[i] == "\\":
                    i += 1
                chars.append(sql[i])
                i += 1
            out.append("".join(chars))
        i += 1
    return out


filters = st.lists(
    st.tuples(
        st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
            lambda n: n not in {"and", "is", "not", "null", "true", "false"}
        ),
        st.text(
            st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="'\\"),
            max_size=10,
        ),
    ),
    min_size=1,
    max_size=3,
).map(lambda pairs: parse_filter(" AND ".join(f"{c} = '{v}'" for c, v in pairs)))


@given(filters)
def test_where_argument_carries_exactly_the_rendered_filter(scope: PartitionFilter) -> None:
    sql = rewrite_data_files_sql("icefjord", TABLE, scope, {})
    arguments = _string_arguments(sql)
    assert arguments == ["`shop`.`orders`", "binpack", scope.render(quoted=True)]
    # Outside the literals there is nothing but the fixed statement skeleton.
    skeleton = re.sub(r"'(?:[^'\\]|\\.)*'", "''", sql)
    assert skeleton == (
        "CALL `icefjord`.system.rewrite_data_files(table => '', strategy => '', where => '')"
    )
