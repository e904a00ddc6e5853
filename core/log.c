/*
 * Operator log. Each line is formatted into a stack buffer and written with
 * one write(2), so lines from different threads never interleave (stderr
 * writes up to PIPE_BUF are atomic on pipes and ordinary on files). A line
 * longer than the buffer is truncated, never split.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static enum log_level log_level_max = LOG_INFO;

static const char *const log_level_names[] = { "error", "warn", "info", "debug" };

void log_set_level(enum log_level level)
{
	log_level_max = level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (level > log_level_max)
		return;
	int n = snprintf(line, sizeof(line), "agentsnetd: %s: ", log_level_names[level]);
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t ret = write(STDERR_FILENO, line, len);
	(void)ret; /* Nowhere left to report a failing stderr. */
}
