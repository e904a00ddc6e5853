/*
 * The webhook's URL (core/webhook.h), parsed apart from the thread so the
 * policy's loader can check it at its line: pure, libc only. An https host
 * is checked for its shape only: whether it resolves, and to what, is the
 * thread's business at each try.
 */
#include "core/webhook.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/an.h"

static int fail_why(char *why, size_t cap, const char *msg)
{
	snprintf(why, cap, "%s", msg);
	return -EINVAL;
}

/* "localhost", a 127.0.0.0/8 literal or "[::1]" with its port into <t>; -EINVAL otherwise. */
static int target_address(const char *host, size_t host_len, uint16_t port,
			  struct webhook_target *t)
{
	char text[48];

	if (host_len == 0 || host_len >= sizeof(text))
		return -EINVAL;
	memcpy(text, host, host_len);
	text[host_len] = '\0';
	memset(&t->addr, 0, sizeof(t->addr));
	if (strcmp(text, "localhost") == 0)
		snprintf(text, sizeof(text), "127.0.0.1");
	struct sockaddr_in *v4 = (struct sockaddr_in *)&t->addr;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&t->addr;
	if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
		if ((ntohl(v4->sin_addr.s_addr) >> 24) != 127)
			return -EINVAL;
		v4->sin_family = AF_INET;
		v4->sin_port = htons(port);
		t->addr_len = sizeof(*v4);
		snprintf(t->host, sizeof(t->host), "%s:%u", text, port);
		return 0;
	}
	if (text[0] == '[' && text[host_len - 1] == ']') {
		text[host_len - 1] = '\0';
		if (inet_pton(AF_INET6, text + 1, &v6->sin6_addr) != 1 ||
		    !IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr))
			return -EINVAL;
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(port);
		t->addr_len = sizeof(*v6);
		snprintf(t->host, sizeof(t->host), "[::1]:%u", port);
		return 0;
	}
	return -EINVAL;
}

/*
 * An https host into <t>: a DNS name (kept lower case), an IPv4 literal or a
 * bracketed IPv6 one (kept without its brackets); -EINVAL otherwise.
 */
static int target_name(const char *host, size_t host_len, uint16_t port, struct webhook_target *t)
{
	unsigned char addr[16];
	char text[LIMITS_HOST_BYTES_MAX + 1];

	if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
		if (host_len - 2 >= sizeof(text) || host_len - 2 == 0)
			return -EINVAL;
		memcpy(text, host + 1, host_len - 2);
		text[host_len - 2] = '\0';
		if (inet_pton(AF_INET6, text, addr) != 1)
			return -EINVAL;
		memcpy(t->name, text, host_len - 1);
		snprintf(t->host, sizeof(t->host), "[%s]:%u", t->name, port);
		return 0;
	}
	/* A name: 1..253 bytes of labels of 1..63 letters, digits and '-' (an IPv4 literal is one). */
	if (host_len == 0 || host_len > 253)
		return -EINVAL;
	size_t label = 0;
	for (size_t i = 0; i < host_len; i++) {
		char ch = host[i];
		if (ch == '.') {
			if (label == 0)
				return -EINVAL;
			label = 0;
		} else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			   (ch >= '0' && ch <= '9') || ch == '-') {
			if (++label > 63)
				return -EINVAL;
		} else {
			return -EINVAL;
		}
		t->name[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
	}
	if (label == 0)
		return -EINVAL;
	t->name[host_len] = '\0';
	snprintf(t->host, sizeof(t->host), "%s:%u", t->name, port);
	return 0;
}

int webhook_target_parse(const char *url, size_t len, struct webhook_target *t, char *why,
			 size_t cap)
{
	AN_ASSERT(url != NULL && t != NULL && cap > 0);
	memset(t, 0, sizeof(*t));
	if (len > WEBHOOK_URL_BYTES_MAX)
		return fail_why(why, cap, "is longer than 2048 bytes");
	size_t scheme_len = 0;
	if (len >= 8 && strncasecmp(url, "https://", 8) == 0) {
		t->tls = true;
		scheme_len = 8;
	} else if (len >= 7 && strncasecmp(url, "http://", 7) == 0) {
		scheme_len = 7;
	} else {
		return fail_why(why, cap, "must begin with https:// or http://");
	}
	const char *p = url + scheme_len;
	const char *end = url + len;
	const char *slash = memchr(p, '/', (size_t)(end - p));
	const char *authority_end = slash != NULL ? slash : end;
	if (memchr(p, '@', (size_t)(authority_end - p)) != NULL)
		return fail_why(why, cap,
				"has a user part: put a credential in authorization_file");
	/* The port follows the last ':' after any ']' of an IPv6 literal. */
	const char *bracket = memchr(p, ']', (size_t)(authority_end - p));
	const char *colon_from = bracket != NULL ? bracket : p;
	const char *colon = memchr(colon_from, ':', (size_t)(authority_end - colon_from));
	uint32_t port = t->tls ? 443 : 80;
	if (colon != NULL) {
		if (colon + 1 == authority_end || authority_end - colon > 6)
			return fail_why(why, cap, "has a port that is not 1..65535");
		port = 0;
		for (const char *d = colon + 1; d < authority_end; d++) {
			if (*d < '0' || *d > '9')
				return fail_why(why, cap, "has a port that is not 1..65535");
			port = port * 10 + (uint32_t)(*d - '0');
		}
		if (port == 0 || port > 65535)
			return fail_why(why, cap, "has a port that is not 1..65535");
	}
	t->port = (uint16_t)port;
	const char *host_end = colon != NULL ? colon : authority_end;
	if (t->tls && target_name(p, (size_t)(host_end - p), t->port, t) != 0)
		return fail_why(why, cap,
				"must name a host: a DNS name, an IPv4 address or a bracketed "
				"IPv6 one");
	if (!t->tls && target_address(p, (size_t)(host_end - p), t->port, t) != 0)
		return fail_why(why, cap,
				"is http:// to an address that is not loopback (127.0.0.1, "
				"[::1] or localhost): alerts leave this host only over https://");
	size_t path_len = slash != NULL ? (size_t)(end - slash) : 1;
	if (path_len > WEBHOOK_PATH_BYTES_MAX)
		return fail_why(why, cap, "has a path longer than 1024 bytes");
	if (slash == NULL) {
		memcpy(t->path, "/", 2);
		return 0;
	}
	for (const char *c = slash; c < end; c++) {
		if (*c <= 0x20 || *c >= 0x7f || *c == '#')
			return fail_why(why, cap,
					"has a path byte that is not visible ASCII, or a '#'");
	}
	memcpy(t->path, slash, path_len);
	t->path[path_len] = '\0';
	return 0;
}
