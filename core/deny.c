/*
 * Formats refusals. The body is measured first (its length goes in
 * Content-Length), then the head and the body are written, both with a
 * bounded writer that records overflow instead of failing at each step; one
 * check at the end turns overflow into -EMSGSIZE. A writer without a buffer
 * only counts. Rejected: building the body in a fixed scratch buffer (a rule's
 * instruction is up to 512 bytes and escapes can grow it six-fold, so any
 * fixed size is either wasteful or a wrong -EMSGSIZE). Refusals are rare and
 * small, so clarity wins over speed here; the buffer they go into is a pooled
 * head buffer.
 */
#include "core/deny.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/an.h"

struct out_buf {
	char *p;
	size_t len;
	size_t cap;
	bool overflow;
};

static void put_bytes(struct out_buf *o, const char *s, size_t n)
{
	if (o->p == NULL) {
		o->len += n;
		return;
	}
	if (o->overflow || n > o->cap - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void put_str(struct out_buf *o, const char *s)
{
	put_bytes(o, s, strlen(s));
}

static void put_u32(struct out_buf *o, uint32_t v)
{
	char tmp[16];
	int n = snprintf(tmp, sizeof(tmp), "%u", v);
	put_bytes(o, tmp, (size_t)n);
}

/* A header value: control characters become spaces (no CR/LF injection). */
static void put_header_value(struct out_buf *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if ((unsigned char)c < 0x20 || c == 0x7f)
			c = ' ';
		put_bytes(o, &c, 1);
	}
}

static void put_json_string(struct out_buf *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	put_bytes(o, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char esc[2] = { '\\', (char)c };
			put_bytes(o, esc, 2);
		} else if (c < 0x20 || c == 0x7f || c >= 0x80) {
			/* Hosts are ASCII after parsing; anything else is shown escaped. */
			char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
			put_bytes(o, esc, 6);
		} else {
			put_bytes(o, (const char *)&c, 1);
		}
	}
	put_bytes(o, "\"", 1);
}

static void put_json_field(struct out_buf *o, const char *key, const char *s, size_t n, bool first)
{
	if (!first)
		put_str(o, ",");
	put_str(o, "\"");
	put_str(o, key);
	put_str(o, "\":");
	if (s == NULL)
		put_str(o, "null");
	else
		put_json_string(o, s, n);
}

static void format_body(const struct deny_info *d, const char *instruction, struct out_buf *o)
{
	const char *code = reason_code(d->reason);

	put_str(o, "{");
	put_json_field(o, "reason", code, strlen(code), true);
	put_str(o, ",\"status\":");
	put_u32(o, reason_status(d->reason));
	put_json_field(o, "instruction", instruction, strlen(instruction), false);
	put_json_field(o, "host", d->host, d->host_len, false);
	put_str(o, ",\"port\":");
	put_u32(o, d->port);
	if (d->address != NULL && d->address_class != NULL) {
		put_json_field(o, "address", d->address, strlen(d->address), false);
		put_json_field(o, "address_class", d->address_class, strlen(d->address_class),
			       false);
	}
	put_json_field(o, "sandbox", d->sandbox, d->sandbox ? strlen(d->sandbox) : 0, false);
	put_json_field(o, "rule", d->rule, d->rule ? strlen(d->rule) : 0, false);
	put_json_field(o, "audit_id", d->audit_id, d->audit_id ? strlen(d->audit_id) : 0, false);
	put_str(o, "}\n");
}

ssize_t deny_format(const struct deny_info *d, char *out, size_t cap)
{
	const char *instruction = d->instruction ? d->instruction : reason_instruction(d->reason);
	uint16_t status = reason_status(d->reason);
	struct out_buf b = { .p = NULL };
	struct out_buf o = { .p = out, .cap = cap };

	AN_ASSERT(d->reason != REASON_NONE);
	AN_ASSERT(status >= 400);
	format_body(d, instruction, &b);
	if (b.len > cap)
		return -EMSGSIZE;
	put_str(&o, "HTTP/1.1 ");
	put_u32(&o, status);
	put_str(&o, " ");
	put_str(&o, reason_phrase(status));
	put_str(&o, "\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n");
	put_str(&o, d->keep_alive ? "Connection: keep-alive" : "Connection: close");
	put_str(&o, "\r\nX-Agent-Reason: ");
	put_str(&o, reason_code(d->reason));
	put_str(&o, "\r\nX-Agent-Instruction: ");
	put_header_value(&o, instruction, strlen(instruction));
	if (d->rule != NULL) {
		put_str(&o, "\r\nX-Agent-Rule: ");
		put_header_value(&o, d->rule, strlen(d->rule));
	}
	if (d->audit_id != NULL) {
		put_str(&o, "\r\nX-Agent-Audit-Id: ");
		put_header_value(&o, d->audit_id, strlen(d->audit_id));
	}
	if (d->retry_after_s != 0) {
		put_str(&o, "\r\nRetry-After: ");
		put_u32(&o, d->retry_after_s);
	}
	put_str(&o, "\r\nContent-Length: ");
	put_u32(&o, (uint32_t)b.len);
	put_str(&o, "\r\n\r\n");
	size_t head_len = o.len;
	format_body(d, instruction, &o);
	if (o.overflow)
		return -EMSGSIZE;
	AN_ASSERT(o.len - head_len == b.len);
	return (ssize_t)o.len;
}

void deny_private_address_text(const char *host, size_t host_len, const char *address,
			       const char *address_class, char *detail, size_t detail_cap,
			       char *instruction, size_t instruction_cap)
{
	AN_ASSERT(host != NULL && address != NULL && address_class != NULL);
	snprintf(detail, detail_cap, "address %s class %s", address, address_class);
	snprintf(instruction, instruction_cap,
		 "%.*s resolved to %s, a %s address, which this sandbox may not reach; if it "
		 "should, the operator adds it to resolver.allow_private. Do not retry.",
		 (int)host_len, host, address, address_class);
}
