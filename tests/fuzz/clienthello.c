/*
 * libFuzzer driver for the passthrough tier's server-name reader
 * (core/clienthello.c). The input is a tunnel's first flight. Invariants:
 *   - nothing is read past the input or written past the scratch (ASan);
 *   - the answer never depends on what the scratch held before (read with
 *     it zeroed and with it filled): the reader reads only what it joined;
 *   - NOT_TLS exactly when the first byte is not 22;
 *   - a NAME is 1..255 bytes of LDH, '_' and '.', with no empty label;
 *   - every answer but NEED_MORE is final: the same answer (and the same
 *     name) for the input with any bytes appended, since bytes past a
 *     ClientHello are never read;
 *   - every strict prefix of an input that reads as NAME or NO_NAME is
 *     NEED_MORE or that same answer (only bytes past the ClientHello may be
 *     missing from it): a reader that answered early could be fooled by the
 *     rest.
 *
 * fuzz-sources: core/clienthello.c
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/clienthello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t scratch[CLIENTHELLO_MESSAGE_BYTES_MAX + 4];
static uint8_t scratch2[CLIENTHELLO_MESSAGE_BYTES_MAX + 4];

static bool name_valid(const char *n, size_t len)
{
	size_t label = 0;
	if (len == 0 || len > 255)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = n[i];
		if (ch == '.') {
			if (label == 0)
				return false;
			label = 0;
		} else if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9') || ch == '-' || ch == '_') ||
			   ++label > 63) {
			return false;
		}
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct clienthello_name out = { 0 }, again = { 0 };
	memset(scratch, 0, sizeof(scratch));
	memset(scratch2, 0x01, sizeof(scratch2)); /* a ClientHello's type byte, stale */
	enum clienthello_result r =
	    clienthello_server_name(data, size, scratch, sizeof(scratch), &out);
	if (clienthello_server_name(data, size, scratch2, sizeof(scratch2), &again) != r ||
	    (r == CLIENTHELLO_NAME &&
	     (again.len != out.len || memcmp(again.name, out.name, out.len) != 0)))
		abort();

	if ((size > 0 && data[0] != 22) != (r == CLIENTHELLO_NOT_TLS))
		abort();
	if (r == CLIENTHELLO_NAME && !name_valid(out.name, out.len))
		abort();
	if (r != CLIENTHELLO_NEED_MORE) {
		uint8_t *longer = malloc(size + 7);
		if (longer == NULL)
			return 0;
		memcpy(longer, data, size);
		memcpy(longer + size, "\x16\x03\x01\x00\x01\x01\x00", 7);
		enum clienthello_result r2 =
		    clienthello_server_name(longer, size + 7, scratch2, sizeof(scratch2), &again);
		if (r2 != r ||
		    (r == CLIENTHELLO_NAME &&
		     (again.len != out.len || memcmp(again.name, out.name, out.len) != 0)))
			abort();
		free(longer);
	}
	if (r == CLIENTHELLO_NAME || r == CLIENTHELLO_NO_NAME) {
		for (size_t k = 0; k < size; k++) {
			enum clienthello_result rk =
			    clienthello_server_name(data, k, scratch2, sizeof(scratch2), &again);
			if (rk != CLIENTHELLO_NEED_MORE && rk != r)
				abort();
		}
	}
	return 0;
}
