package io.icefjord.peer;

import java.time.LocalDate;
import org.apache.flink.table.functions.ScalarFunction;

/** Debezium's {@code io.debezium.time.Date}: days since 1970-01-01, an INT in JSON. */
public class EpochDay extends ScalarFunction {
  public LocalDate eval(Integer days) {
    return days == null ? null : LocalDate.ofEpochDay(days);
  }
}
