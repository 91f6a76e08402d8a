/*
 * Hadoop's local file system ("file://"), with permissions set in the JVM.
 *
 * Without Hadoop's native library, RawLocalFileSystem sets a permission by starting a
 * `chmod` process, and it sets one on every file it creates (and on its .crc checksum file).
 * An Iceberg commit creates four to eight such files (manifests, manifest list, metadata),
 * and a Spark write one more per data file. On the local stack one chmod cost the JVM and
 * the child 8.6 ms of CPU and 7.9 ms of wall time.
 *
 * This class is Hadoop's LocalFileSystem (checksums included) over a raw file system whose
 * setPermission calls java.nio's Files.setPosixFilePermissions: the same mode bits, no
 * process. A sticky bit, which java.nio cannot set, still goes through Hadoop's chmod.
 *
 * Use: spark.hadoop.fs.file.impl=io.icefjord.hadoop.NioLocalFileSystem, with this jar on
 * the classpath. The local stack compiles it against the Hadoop client jar pyspark ships
 * (icefjord/local/artifacts.py) and sets it for the writer's and the maintainer's Spark.
 */
package io.icefjord.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

public class NioLocalFileSystem extends LocalFileSystem {

  public NioLocalFileSystem() {
    super(new Raw());
  }

  /** RawLocalFileSystem with {@link #setPermission} in the JVM. */
  public static class Raw extends RawLocalFileSystem {

    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE,
      PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE,
      PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE,
      PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {
        super.setPermission(p, permission);
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
    }

    /** The permissions of the low nine bits of a mode (rwx for owner, group, others). */
    static Set<PosixFilePermission> posix(int mode) {
      Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
      for (int bit = 0; bit < BITS.length; bit++) {
        if ((mode & (1 << bit)) != 0) {
          out.add(BITS[bit]);
        }
      }
      return out;
    }
  }
}
