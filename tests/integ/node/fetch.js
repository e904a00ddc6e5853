'use strict';
/*
 * Node client of the integration suite: fetch() through undici's ProxyAgent
 * (Node 20's fetch has no proxy support of its own). The test CA comes from
 * NODE_EXTRA_CA_CERTS, as it would in a sandbox.
 *
 *   node fetch.js '{"url": "...", "proxy": "http://127.0.0.1:8080",
 *                   "method": "GET", "headers": {}, "body": null}'
 *
 * Prints one JSON line: {status, headers, body_len, body_sha256, body} or
 * {error}; exits 0 either way (the suite judges the result).
 */
const crypto = require('node:crypto');
const { fetch, ProxyAgent } = require('undici');

const TEXT_BYTES_MAX = 65536;

async function main() {
	const spec = JSON.parse(process.argv[2]);
	const dispatcher = new ProxyAgent(spec.proxy);
	let out;
	try {
		const resp = await fetch(spec.url, {
			dispatcher,
			method: spec.method || 'GET',
			headers: spec.headers || {},
			body: spec.body == null ? undefined : spec.body,
			signal: AbortSignal.timeout((spec.timeout_s || 30) * 1000),
		});
		const body = Buffer.from(await resp.arrayBuffer());
		const headers = {};
		for (const [name, value] of resp.headers) {
			headers[name] = value;
		}
		out = {
			status: resp.status,
			headers,
			body_len: body.length,
			body_sha256: crypto.createHash('sha256').update(body).digest('hex'),
			body: body.length <= TEXT_BYTES_MAX ? body.toString('utf8') : null,
		};
	} catch (e) {
		/* fetch() wraps the real failure (e.g. the proxy's CONNECT status) in causes. */
		const chain = [];
		for (let c = e; c && chain.length < 5; c = c.cause) {
			chain.push(String(c));
		}
		out = { error: chain.join(': ') };
	}
	/*
	 * Print first: after a failed tunnel, close() may never settle, and Node
	 * exits silently once nothing is pending.
	 */
	process.stdout.write(JSON.stringify(out) + '\n');
	await dispatcher.destroy().catch(() => {});
}

main();
