/*
 * An Iceberg commit that is refused, not retried, once the maintainer's compaction lease
 * is on the table.
 *
 * The writer looks at the lease (the table property shared/lease.py names) before it
 * commits. A lease taken after that look, while the commit writes its manifests, makes the
 * catalog's swap fail, and Iceberg retries the commit on the refreshed metadata: the
 * lease's. The commit then lands under the lease and the maintainer's rewrite, planned
 * before it, fails on its deletes ("found new position delete for replaced data file") and
 * runs again while the writer waits.
 *
 * This class wraps a table's TableOperations. Every call goes to the table's own, except
 * commit(base, metadata): when `base`, the metadata the commit was built on, carries a
 * lease that has not run out, it throws LeaseTakenException. That exception is no
 * CommitFailedException, so Iceberg does not retry it, and it is a CleanableFailure, so
 * Iceberg removes the manifests it wrote. The catalog swaps only from `base`: a commit
 * that passes the check lands on metadata without a lease, or not at all.
 *
 * Use from the writer (services/iceberg_writer/upserts.py):
 *   LeaseGuard.guard(table, "icefjord.maintenance.lease-until-ms").newRowDelta()...
 * The local stack compiles it against Iceberg's Spark runtime jar
 * (icefjord/local/artifacts.py); the writer's image compiles it in its jars stage.
 */
package io.icefjord.iceberg;

import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.exceptions.CleanableFailure;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;

public final class LeaseGuard implements TableOperations {

  /** A commit refused because its base metadata carries the compaction lease. */
  public static final class LeaseTakenException extends RuntimeException
      implements CleanableFailure {
    private static final long serialVersionUID = 1L;

    LeaseTakenException(String message) {
      super(message);
    }
  }

  private final TableOperations ops;
  private final String property;

  private LeaseGuard(TableOperations ops, String property) {
    this.ops = ops;
    this.property = property;
  }

  /** `table` with commits refused once a lease in `property` is on it; same state. */
  public static Table guard(Table table, String property) {
    TableOperations ops = ((HasTableOperations) table).operations();
    return new BaseTable(new LeaseGuard(ops, property), table.name());
  }

  /**
   * The lease's end in `metadata`, as Unix ms, or Long.MIN_VALUE when there is none or it is
   * unreadable (an unreadable lease must not stop the writer; shared/lease.py reads it so).
   */
  static long leaseUntil(TableMetadata metadata, String property) {
    String raw = metadata.properties().get(property);
    if (raw == null) {
      return Long.MIN_VALUE;
    }
    try {
      return Long.parseLong(raw.trim());
    } catch (NumberFormatException e) {
      return Long.MIN_VALUE;
    }
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    if (base != null) {
      long until = leaseUntil(base, property);
      if (until > System.currentTimeMillis()) {
        throw new LeaseTakenException(
            "the compaction lease (" + property + " = " + until + ") was taken while the"
                + " commit was being made");
      }
    }
    ops.commit(base, metadata);
  }

  @Override
  public TableMetadata current() {
    return ops.current();
  }

  @Override
  public TableMetadata refresh() {
    return ops.refresh();
  }

  @Override
  public FileIO io() {
    return ops.io();
  }

  @Override
  public EncryptionManager encryption() {
    return ops.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return ops.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return ops.locationProvider();
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    return new LeaseGuard(ops.temp(uncommittedMetadata), property);
  }

  @Override
  public long newSnapshotId() {
    return ops.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return ops.requireStrictCleanup();
  }
}
