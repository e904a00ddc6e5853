/*
 * Operator log. Each line is formatted into a stack buffer and written with
 * one write(2), so lines from different threads never interleave (stderr
 * writes up to PIPE_BUF are atomic on pipes and ordinary on files). A line
 * longer than the buffer is truncated, never split.
 */
#include "core/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum log_level log_level_max = LOG_INFO;
static bool log_stamped = true;

/* Whether standard error is the journal's stream: $JOURNAL_STREAM is its "device:inode". */
static bool stderr_is_journal(void)
{
	const char *stream = getenv("JOURNAL_STREAM");
	unsigned long long dev = 0;
	unsigned long long ino = 0;
	struct stat st;

	if (stream == NULL || sscanf(stream, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_level(enum log_level level)
{
	log_level_max = level;
	log_stamped = !stderr_is_journal();
}

/* Writes "[time ]agentsnetd: <prefix><fmt...>\n" in one write. */
static void log_write(const char *prefix, const char *fmt, va_list ap)
{
	char line[1024];
	size_t n = 0;

	if (log_stamped) {
		struct timespec now;
		struct tm tm;
		(void)clock_gettime(CLOCK_REALTIME, &now);
		(void)gmtime_r(&now.tv_sec, &tm);
		n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
		n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ ",
				      now.tv_nsec / 1000000L);
	}
	n += (size_t)snprintf(line + n, sizeof(line) - n, "agentsnetd: %s", prefix);
	int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	size_t len = n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t ret = write(STDERR_FILENO, line, len);
	(void)ret; /* Nowhere left to report a failing stderr. */
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const prefixes[] = { "error: ", "warn: ", "info: ", "debug: " };
	va_list ap;

	if (level > log_level_max)
		return;
	va_start(ap, fmt);
	log_write(prefixes[level], fmt, ap);
	va_end(ap);
}

void log_status(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_write("", fmt, ap);
	va_end(ap);
}
