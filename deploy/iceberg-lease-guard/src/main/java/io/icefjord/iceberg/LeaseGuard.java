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
 * The same holds for the claims of the partitions a writer instance records
 * (services/iceberg_writer/ownership.py): an instance that lost a partition in a rebalance
 * it has not seen yet looks at the claims before it commits, and a claim made after that
 * look would let its commit land on the new owner's metadata. Through the guard, a commit
 * whose base names another owner for one of its partitions is refused too
 * (ClaimLostException). That is what lets instances of one table commit deletes side by
 * side without Iceberg's check for concurrent delete files, which refused every commit that
 * overlapped another instance's: their keys are their partitions' own.
 *
 * This class wraps a table's TableOperations. Every call goes to the table's own, except
 * commit(base, metadata): when `base`, the metadata the commit was built on, carries a
 * lease that has not run out, it throws LeaseTakenException, and when it names another
 * owner for a claimed partition, ClaimLostException. Neither is a CommitFailedException,
 * so Iceberg does not retry them, and both are CleanableFailures, so Iceberg removes the
 * manifests it wrote. The catalog swaps only from `base`: a commit that passes the checks
 * lands on metadata without a lease and with its claims, or not at all.
 *
 * Use from the writer (services/iceberg_writer/upserts.py):
 *   LeaseGuard.guard(table, "icefjord.maintenance.lease-until-ms", claims).newRowDelta()...
 * where `claims` maps each partition's owner property to this instance's token, and a null
 * property checks no lease.
 * The local stack compiles it against Iceberg's Spark runtime jar
 * (icefjord/local/artifacts.py); the writer's image compiles it in its jars stage.
 */
package io.icefjord.iceberg;

import java.util.Collections;
import java.util.Map;
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

  /** A commit refused because its base metadata names another owner of a partition. */
  public static final class ClaimLostException extends RuntimeException
      implements CleanableFailure {
    private static final long serialVersionUID = 1L;

    ClaimLostException(String message) {
      super(message);
    }
  }

  private final TableOperations ops;
  private final String property;
  private final Map<String, String> claims;

  private LeaseGuard(TableOperations ops, String property, Map<String, String> claims) {
    this.ops = ops;
    this.property = property;
    this.claims = claims;
  }

  /** `table` with commits refused once a lease in `property` is on it; same state. */
  public static Table guard(Table table, String property) {
    return guard(table, property, Collections.emptyMap());
  }

  /**
   * `table` with commits refused once a lease in `property` is on it (none checked when it
   * is null), or once a property of `claims` holds another value than the claim's (a
   * property not set refuses nothing: a partition nobody has claimed yet); same state.
   */
  public static Table guard(Table table, String property, Map<String, String> claims) {
    TableOperations ops = ((HasTableOperations) table).operations();
    return new BaseTable(new LeaseGuard(ops, property, Map.copyOf(claims)), table.name());
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
      long until = property == null ? Long.MIN_VALUE : leaseUntil(base, property);
      if (until > System.currentTimeMillis()) {
        throw new LeaseTakenException(
            "the compaction lease (" + property + " = " + until + ") was taken while the"
                + " commit was being made");
      }
      for (Map.Entry<String, String> claim : claims.entrySet()) {
        String owner = base.properties().get(claim.getKey());
        if (owner != null && !owner.equals(claim.getValue())) {
          throw new ClaimLostException(
              claim.getKey() + " is claimed by " + owner + ", not " + claim.getValue());
        }
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
    return new LeaseGuard(ops.temp(uncommittedMetadata), property, claims);
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
