#!/usr/bin/env bash
# Regenerates the Swift code of the protobuf messages stallmon writes (committed: building swift-protobuf's plugin
# takes minutes, and CI builds from a fresh clone). Run it only when a .proto changes; it needs protoc and
# protoc-gen-swift of swift-protobuf 1.39.0 (PROTOC_GEN_SWIFT=path, else on PATH).
#   - pprof's profile.proto: scripts/protos/profile.proto, from github.com/google/pprof (proto/profile.proto).
#   - OTLP profiles (profiles/v1development) and what it imports: the descriptors of the official
#     opentelemetry-proto Python package (the same the tests decode with; its version is printed), so that what we
#     send and what the tests decode come from one definition.
set -euo pipefail
cd "$(dirname "$0")/.."
plugin="${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift)}"
out=Sources/StallmonProfiles/Generated
mkdir -p "$out"
protoc --plugin=protoc-gen-swift="$plugin" --swift_opt=Visibility=Package --swift_opt=FileNaming=PathToUnderscores \
    -I scripts/protos --swift_out="$out" profile.proto
set_file="$(mktemp)"
trap 'rm -f "$set_file"' EXIT
python3 - "$set_file" <<'PY'
import sys
from importlib.metadata import version
from google.protobuf import descriptor_pb2
import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 as service
files, seen = descriptor_pb2.FileDescriptorSet(), set()
def add(descriptor):
    if descriptor.name in seen: return
    for dependency in descriptor.dependencies: add(dependency)
    seen.add(descriptor.name)
    files.file.append(descriptor_pb2.FileDescriptorProto.FromString(descriptor.serialized_pb))
add(service.DESCRIPTOR)
open(sys.argv[1], "wb").write(files.SerializeToString())
print("opentelemetry-proto", version("opentelemetry-proto"), ":", ", ".join(sorted(seen)), file=sys.stderr)
PY
protoc --plugin=protoc-gen-swift="$plugin" --swift_opt=Visibility=Package --swift_opt=FileNaming=PathToUnderscores \
    --descriptor_set_in="$set_file" --swift_out="$out" \
    opentelemetry/proto/common/v1/common.proto opentelemetry/proto/resource/v1/resource.proto \
    opentelemetry/proto/profiles/v1development/profiles.proto \
    opentelemetry/proto/collector/profiles/v1development/profiles_service.proto
ls "$out"
