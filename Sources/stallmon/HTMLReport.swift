import Foundation
import Stallmon
import StallmonReport

/// `stallmon report --html`: one self-contained page (no network access): the summary, a duration histogram, the
/// groups table and an interactive flame graph (click to zoom, hover for counts). All code is stallmon's own.
enum HTMLReport {
    /// `timeline`: the path of a `--timeline` trace written beside the page, linked from it (relative to the page
    /// when both are in one directory).
    static func render(summary: StallSummary, flame: FlameNode, timeline: (path: String, page: String)? = nil) throws
        -> String {
        struct Payload: Encodable {
            var summary: StallSummary
            var flame: FlameNode
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = String(decoding: try encoder.encode(Payload(summary: summary, flame: flame)), as: UTF8.self)
            .replacingOccurrences(of: "</", with: "<\\/")  // never close the script element from inside the data
        return page.replacingOccurrences(of: "%TIMELINE%", with: timeline.map(timelineLink) ?? "")
            .replacingOccurrences(of: "%DATA%", with: json)
    }

    private static func timelineLink(_ timeline: (path: String, page: String)) -> String {
        let trace = URL(fileURLWithPath: timeline.path).standardizedFileURL
        let page = URL(fileURLWithPath: timeline.page).standardizedFileURL
        let href = trace.deletingLastPathComponent() == page.deletingLastPathComponent()
            ? trace.lastPathComponent : trace.absoluteString
        func escaped(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
        }
        return "<p id=\"timeline\">The same stalls over time: <a href=\"\(escaped(href))\">\(escaped(trace.lastPathComponent))</a> "
            + "(a Chrome JSON trace: open it at ui.perfetto.dev, \"Open trace file\", or in chrome://tracing).</p>"
    }

    private static let page = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <title>stallmon report</title>
        <style>
          body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
          h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
          .muted { color: #666; }
          table { border-collapse: collapse; width: 100%; }
          th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e5e5e5; vertical-align: top; }
          td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
          td.frame { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
          .class { padding: 1px 6px; border-radius: 8px; font-size: 12px; }
          .cpu { background: #fde2c8; } .blocked { background: #cfe3fb; } .starved { background: #f6d2f0; } .throttled { background: #f9d6d5; }
          .unknown { background: #eee; }
          #histogram rect { fill: #e8833a; } #histogram text { font-size: 11px; fill: #444; }
          #flame { position: relative; width: 100%; overflow: hidden; border: 1px solid #ddd; }
          .node { position: absolute; height: 17px; overflow: hidden; white-space: nowrap; font: 11px/17px ui-monospace,
                  monospace; padding: 0 3px; box-sizing: border-box; border-right: 1px solid #fff; cursor: pointer; }
          .node:hover { filter: brightness(0.9); }
          #details { font-family: ui-monospace, monospace; font-size: 12px; min-height: 18px; }
        </style>
        </head>
        <body>
        <h1>stallmon report</h1>
        <div id="overview" class="muted"></div>
        %TIMELINE%
        <h2>Durations</h2>
        <svg id="histogram" width="640" height="180" role="img" aria-label="histogram of stall durations"></svg>
        <h2>Groups</h2>
        <table id="groups">
          <thead><tr><th class="num">Stalls</th><th class="num">Total</th><th class="num">p50</th><th class="num">Max</th>
          <th>Class</th><th>Signature</th><th>Top in-app frame</th></tr></thead>
          <tbody></tbody>
        </table>
        <h2>Flame graph of all samples</h2>
        <div class="muted">Outermost frames on top. Click a frame to zoom into it; click "all" to reset.</div>
        <div id="details"></div>
        <div id="flame"></div>
        <script id="data" type="application/json">%DATA%</script>
        <script>
        "use strict";
        const data = JSON.parse(document.getElementById("data").textContent);
        const summary = data.summary;
        const fmt = ms => ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms.toFixed(1) + " ms";
        const el = (tag, attrs, text) => {
          const node = document.createElement(tag);
          for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
          if (text !== undefined) node.textContent = text;
          return node;
        };

        const overview = document.getElementById("overview");
        if (summary.durationMs) {
          const d = summary.durationMs;
          overview.textContent = `${summary.stalls} stalls in ${summary.directory} (${summary.loops.join(", ")}), `
            + `${summary.firstStart} to ${summary.lastStart}. p50 ${fmt(d.p50)}, p90 ${fmt(d.p90)}, `
            + `p99 ${fmt(d.p99)}, max ${fmt(d.max)}` + (summary.suppressed ? `; ${summary.suppressed} more rate-limited` : "");
        } else {
          overview.textContent = `No stalls recorded in ${summary.directory}.`;
        }

        (function histogram() {
          const svg = document.getElementById("histogram");
          const ns = "http://www.w3.org/2000/svg";
          const buckets = summary.histogram;
          const widest = Math.max(1, ...buckets.map(b => b.count));
          const barWidth = 640 / buckets.length;
          buckets.forEach((bucket, index) => {
            const height = Math.round(130 * bucket.count / widest);
            const rect = document.createElementNS(ns, "rect");
            rect.setAttribute("x", index * barWidth + 4); rect.setAttribute("y", 145 - height);
            rect.setAttribute("width", barWidth - 8); rect.setAttribute("height", height);
            const title = document.createElementNS(ns, "title");
            const label = bucket.upperMs == null ? `≥ ${fmt(bucket.lowerMs)}` : `${fmt(bucket.lowerMs)} – ${fmt(bucket.upperMs)}`;
            title.textContent = `${label}: ${bucket.count}`;
            rect.appendChild(title); svg.appendChild(rect);
            const count = document.createElementNS(ns, "text");
            count.setAttribute("x", index * barWidth + barWidth / 2); count.setAttribute("y", 140 - height);
            count.setAttribute("text-anchor", "middle"); count.textContent = bucket.count ? bucket.count : "";
            svg.appendChild(count);
            const axis = document.createElementNS(ns, "text");
            axis.setAttribute("x", index * barWidth + barWidth / 2); axis.setAttribute("y", 165);
            axis.setAttribute("text-anchor", "middle");
            axis.textContent = bucket.upperMs == null ? `≥${bucket.lowerMs}` : `${bucket.lowerMs}–${bucket.upperMs}`;
            svg.appendChild(axis);
          });
        })();

        (function groups() {
          const body = document.querySelector("#groups tbody");
          for (const group of summary.groups) {
            const row = el("tr", {"class": "group"});
            row.appendChild(el("td", {"class": "num"}, group.count + (group.suppressed ? ` (+${group.suppressed})` : "")));
            row.appendChild(el("td", {"class": "num"}, fmt(group.totalMs)));
            row.appendChild(el("td", {"class": "num"}, fmt(group.p50Ms)));
            row.appendChild(el("td", {"class": "num"}, fmt(group.maxMs)));
            const cls = el("td"); cls.appendChild(el("span", {"class": "class " + (group["class"] || "unknown")},
                                                    group["class"] || "?"));
            row.appendChild(cls);
            row.appendChild(el("td", {"class": "frame"}, (group.signature || "").slice(0, 16)));
            const where = group.file ? ` (${group.file.split("/").pop()}:${group.line})` : "";
            row.appendChild(el("td", {"class": "frame top-frame"}, group.topFrame + where));
            body.appendChild(row);
          }
        })();

        (function flameGraph() {
          const container = document.getElementById("flame");
          const details = document.getElementById("details");
          const rowHeight = 18;
          const color = name => {
            let hash = 0;
            for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) | 0;
            const hue = 20 + Math.abs(hash) % 40;
            return `hsl(${hue}, 80%, ${62 + Math.abs(hash >> 8) % 18}%)`;
          };
          const depth = node => 1 + Math.max(0, ...node.children.map(depth));
          function draw(focus, path) {
            container.textContent = "";
            container.style.height = (depth(focus) + path.length) * rowHeight + "px";
            const total = Math.max(1, focus.value);
            path.forEach((ancestor, index) => place(ancestor, 0, 100, index, path.slice(0, index)));
            (function layout(node, left, width, level, trail) {
              place(node, left, width, level, trail);
              let offset = left;
              for (const child of node.children) {
                const childWidth = width * child.value / Math.max(1, node.value);
                if (childWidth > 0.05) layout(child, offset, childWidth, level + 1, trail.concat([node]));
                offset += childWidth;
              }
            })(focus, 0, 100, path.length, path);
            function place(node, left, width, level, trail) {
              const box = el("div", {"class": "node", "title": `${node.name}: ${node.value} samples`}, node.name);
              box.style.left = left + "%"; box.style.width = width + "%"; box.style.top = level * rowHeight + "px";
              box.style.background = color(node.name);
              box.addEventListener("mouseenter", () => {
                details.textContent = `${node.name} — ${node.value} samples (${(100 * node.value / total).toFixed(1)}%)`;
              });
              box.addEventListener("click", () => node === data.flame ? draw(data.flame, []) : draw(node, trail));
              container.appendChild(box);
            }
          }
          draw(data.flame, []);
        })();
        </script>
        </body>
        </html>

        """
}
