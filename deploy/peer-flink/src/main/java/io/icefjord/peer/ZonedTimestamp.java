package io.icefjord.peer;

import java.time.Instant;
import java.time.OffsetDateTime;
import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * Debezium's {@code io.debezium.time.ZonedTimestamp}: ISO-8601 text with an offset and up to
 * nine fraction digits, trailing zeros dropped ("2024-01-01T00:00:01.5Z").
 */
public class ZonedTimestamp extends ScalarFunction {
  public @DataTypeHint("TIMESTAMP_LTZ(6)") Instant eval(String text) {
    return text == null ? null : OffsetDateTime.parse(text).toInstant();
  }
}
