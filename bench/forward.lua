-- wrk script for bench/run.sh: plain-HTTP requests, and their latency tail.
--
-- With BENCH_TARGET=host:port set, each request is absolute-form
-- ("GET http://host:port/ HTTP/1.1"), as an agent sends it to a proxy, and
-- the URL given to wrk is the proxy's; without it, origin form to the URL
-- itself (the direct baseline). BENCH_PATH is the path asked for ("/" by
-- default). done() prints one JSON line for run.sh.
local target = os.getenv("BENCH_TARGET")
local path = os.getenv("BENCH_PATH") or "/"

function init(args)
	if target ~= nil and target ~= "" then
		wrk.path = "http://" .. target .. path
		wrk.headers["Host"] = target
	end
end

function done(summary, latency, requests)
	local seconds = summary.duration / 1e6
	local errors = summary.errors.connect + summary.errors.read + summary.errors.write
		+ summary.errors.status + summary.errors.timeout
	io.write(string.format(
		'{"requests": %d, "seconds": %.3f, "rps": %.1f, "errors": %d, "non_2xx": %d, '
		.. '"read_errors": %d, "p50_us": %d, "p99_us": %d, "p999_us": %d}\n',
		summary.requests, seconds, summary.requests / seconds, errors, summary.errors.status,
		summary.errors.read,
		latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
