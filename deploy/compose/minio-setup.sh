#!/bin/sh
# One-shot MinIO setup: the `warehouse` bucket, and an Icefjord user that may only read and
# write that bucket (the services never hold the root credentials). Idempotent.
set -eu

mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"
mc mb --ignore-existing local/warehouse
mc admin policy create local icefjord-warehouse /icefjord/warehouse-policy.json
mc admin user add local "$ICEFJORD_S3_ACCESS_KEY" "$ICEFJORD_S3_SECRET_KEY"
# Attaching twice is an error; then the policy must already be the user's.
if ! mc admin policy attach local icefjord-warehouse --user "$ICEFJORD_S3_ACCESS_KEY"; then
  case "$(mc admin user info local "$ICEFJORD_S3_ACCESS_KEY")" in
    *icefjord-warehouse*) ;;
    *) echo "user $ICEFJORD_S3_ACCESS_KEY lacks policy icefjord-warehouse" >&2; exit 1 ;;
  esac
fi
