#!/usr/bin/env python3
"""A scripted collector for stallmon's upload tests, on 127.0.0.1.

Each request consumes the next behaviour of --plan (a JSON list); when the plan is exhausted, requests get 200.
Behaviours: {"status": N, "body": "...", "retry_after": "1", "partial": K, "sleep": seconds, "reset": true}.
Bodies are gunzipped and parsed: OTLP JSON with the official opentelemetry-proto package (json_format.Parse into
ExportLogsServiceRequest, which refuses unknown fields; a log record's traceId and spanId, which OTLP's JSON mapping
writes in hex, first turned into the base64 protobuf's JSON mapping expects), OTLP profiles (protobuf, POST
/v1development/profiles) with the same package's ExportProfilesServiceRequest, every index resolved through the
dictionary (whose entries 0 must be empty, as the specification says), NDJSON line by line. One JSON line per answered request goes to
--log (and one per arrival, before any scripted delay, to --log + ".arrivals"): time, path, behaviour, status, ids, parse error, and the headers that matter.
Stops by itself after --lifetime seconds.
"""
import argparse, base64, gzip, json, socket, struct, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest, ExportProfilesServiceResponse)

parser = argparse.ArgumentParser()
parser.add_argument("--port-file", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--plan", default="[]")
parser.add_argument("--lifetime", type=float, default=120)
parser.add_argument("--no-parse", action="store_true", help="acknowledge without decoding (throughput runs)")
args = parser.parse_args()

plan = json.loads(args.plan)
lock = threading.Lock()
counter = [0]


def hex_ids_to_base64(document):
    """OTLP/JSON writes trace_id and span_id as hex (the OTLP specification's exception to protobuf's JSON mapping,
    which takes base64 for bytes): turned into base64 so json_format decodes them into their 16 and 8 bytes. A value
    that is not hex fails the request."""
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64encode(bytes.fromhex(record[key])).decode()
    return document


def parse_profiles(body):
    """Every profile with its samples resolved: functions innermost first, value, attributes, link, timestamps."""
    request = ExportProfilesServiceRequest()
    request.ParseFromString(body)
    d = request.dictionary
    strings = list(d.string_table)
    assert strings[0] == ""
    for table in (d.mapping_table, d.location_table, d.function_table, d.link_table, d.attribute_table, d.stack_table):
        assert len(table) > 0 and table[0].ByteSize() == 0, "entry 0 of every table is its zero value"
    def function_names(stack_index):
        names = []
        for location_index in d.stack_table[stack_index].location_indices:
            location = d.location_table[location_index]
            for line in location.lines:
                function = d.function_table[line.function_index]
                names.append(strings[function.name_strindex] + ("" if not function.filename_strindex else
                             " @ %s:%d" % (strings[function.filename_strindex], line.line)))
        return names
    resources, profiles = [], []
    for resource_profiles in request.resource_profiles:
        resources.append({a.key: json_format.MessageToDict(a.value) for a in resource_profiles.resource.attributes})
        for scope_profiles in resource_profiles.scope_profiles:
            for profile in scope_profiles.profiles:
                assert len(profile.profile_id) == 16 and any(profile.profile_id)
                samples = []
                for sample in profile.samples:
                    attributes = {}
                    for index in sample.attribute_indices:
                        attribute = d.attribute_table[index]
                        attributes[strings[attribute.key_strindex]] = attribute.value.string_value
                    link = d.link_table[sample.link_index]
                    samples.append({"functions": function_names(sample.stack_index), "values": list(sample.values),
                                    "attributes": attributes, "trace_id": link.trace_id.hex(),
                                    "span_id": link.span_id.hex(),
                                    "timestamps": [str(t) for t in sample.timestamps_unix_nano]})
                profiles.append({"type": strings[profile.sample_type.type_strindex],
                                 "unit": strings[profile.sample_type.unit_strindex],
                                 "time_unix_nano": str(profile.time_unix_nano), "samples": samples,
                                 "resource": len(resources) - 1})
    return profiles, resources


def parse(path, body):
    if path.endswith("/v1development/profiles"):
        profiles, resources = parse_profiles(body)
        return [], resources, profiles
    if path.endswith("/v1/logs"):
        request = ExportLogsServiceRequest()
        json_format.ParseDict(hex_ids_to_base64(json.loads(body.decode("utf-8"))), request)
        ids, resources, records = [], [], []
        for resource_logs in request.resource_logs:
            resources.append({a.key: json_format.MessageToDict(a.value) for a in resource_logs.resource.attributes})
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    attributes = {a.key: a.value for a in record.attributes}
                    ids.append(attributes["stallmon.report.id"].string_value)
                    decoded = {key: json_format.MessageToDict(value) for key, value in attributes.items()}
                    if record.trace_id:
                        decoded["@trace_id"], decoded["@span_id"] = record.trace_id.hex(), record.span_id.hex()
                        assert len(record.trace_id) == 16 and len(record.span_id) == 8
                    records.append(decoded)
                    assert record.time_unix_nano > 0 and record.severity_number == 13
                    assert attributes["stallmon.stall.duration_ms"].double_value > 0
        return ids, resources, records
    return [json.loads(line)["id"] for line in body.decode("utf-8").splitlines() if line.strip()], [], []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # As a collector does (Go's net package sets TCP_NODELAY on every connection): without it, the response's body,
    # written after its headers, waits on Nagle's algorithm for the client's delayed ACK, up to 40 ms a request.
    disable_nagle_algorithm = True

    def log_message(self, *_):
        pass

    def do_POST(self):
        with lock:
            index = counter[0]
            counter[0] += 1
        behaviour = plan[index] if index < len(plan) else {"status": 200}
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        entry = {"n": index, "time": time.time(), "path": self.path, "behaviour": behaviour,
                 "content_encoding": self.headers.get("Content-Encoding"),
                 "content_type": self.headers.get("Content-Type"),
                 "authorization": self.headers.get("Authorization"),
                 "custom": self.headers.get("X-Tenant")}
        try:
            body = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
            if not args.no_parse:
                ids, entry["resources"], parsed = parse(self.path, body)
                entry["ids"] = ids
                entry["profiles" if self.path.endswith("/profiles") else "records"] = parsed
        except Exception as error:  # a payload the official parser refuses
            entry["parse_error"] = repr(error)
            behaviour = {"status": 400, "body": "unparseable: " + repr(error)}
        with lock:
            with open(args.log + ".arrivals", "a") as arrivals:
                arrivals.write(json.dumps({"n": index, "time": time.time(), "ids": entry.get("ids", [])}) + "\n")
        if behaviour.get("sleep"):
            time.sleep(behaviour["sleep"])
        if behaviour.get("reset"):
            entry["status"] = "reset"
            self.write_log(entry)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        status = behaviour.get("status", 200)
        content_type = "application/json"
        if self.path.endswith("/profiles") and status == 200:
            response = ExportProfilesServiceResponse()
            if "partial" in behaviour:
                response.partial_success.rejected_profiles = behaviour["partial"]
                response.partial_success.error_message = "some profiles refused"
            payload, content_type = response.SerializeToString(), "application/x-protobuf"
        elif "partial" in behaviour:
            payload = json.dumps({"partialSuccess": {"rejectedLogRecords": str(behaviour["partial"]),
                                                     "errorMessage": "some records refused"}})
        else:
            payload = behaviour.get("body", "{}" if status == 200 else "error %d" % status)
        data = payload if isinstance(payload, bytes) else payload.encode()
        entry["status"] = status
        self.write_log(entry)
        self.send_response(status)
        if behaviour.get("retry_after") is not None:
            self.send_header("Retry-After", behaviour["retry_after"])
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def write_log(self, entry):
        with lock:
            with open(args.log, "a") as log:
                log.write(json.dumps(entry) + "\n")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(args.port_file + ".tmp", "w") as port_file:
    port_file.write(str(server.server_address[1]))
import os
os.rename(args.port_file + ".tmp", args.port_file)
threading.Timer(args.lifetime, server.shutdown).start()
server.serve_forever()
