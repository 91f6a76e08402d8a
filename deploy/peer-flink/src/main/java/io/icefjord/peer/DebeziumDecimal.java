package io.icefjord.peer;

import java.math.BigDecimal;
import java.math.BigInteger;
import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * Debezium's {@code org.apache.kafka.connect.data.Decimal} (decimal.handling.mode=precise):
 * the unscaled value as big-endian two's-complement bytes, base64 in JSON (Flink's JSON
 * format decodes that into BYTES), its scale in the schema. Flink SQL has no cast for it.
 */
public class DebeziumDecimal extends ScalarFunction {
  public @DataTypeHint("DECIMAL(38, 18)") BigDecimal eval(byte[] unscaled, int scale) {
    return unscaled == null ? null : new BigDecimal(new BigInteger(unscaled), scale);
  }
}
