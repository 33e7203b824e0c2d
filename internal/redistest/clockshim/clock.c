// A clock for one test's redis-server: preloaded into the server, it shifts
// and scales the wall clock (CLOCK_REALTIME, gettimeofday, time) by what a
// file mapped from DLM_CLOCK_FILE says, and leaves the monotonic clock
// alone, as an NTP step or a drifting oscillator would. The file holds four
// int64s: a sequence number (odd while the test writes), anchor (ns of the
// real wall clock), offset (ns) and rate (parts per billion, 1e9 = real
// speed); the server's clock reads
// anchor + (real - anchor) * rate / 1e9 + offset.
//
// libfaketime does this job for most programs but cannot start a
// redis-server linked with jemalloc (libfaketime issue #130): its set-up
// calls clock_gettime through jemalloc, which recurses. This shim makes no
// call that allocates: the real clock comes from the system call.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t *shared; // sequence, anchor, offset, rate; NULL when unset
static volatile int ready;

static void setup(void) {
	if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) return;
	const char *path = getenv("DLM_CLOCK_FILE");
	if (path != NULL) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			void *p = mmap(NULL, 4 * sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
			close(fd);
			if (p != MAP_FAILED) shared = p;
		}
	}
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
}

static int real_clock(clockid_t id, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static void shift(struct timespec *ts) {
	setup();
	if (shared == NULL) return;
	int64_t seq, anchor, offset, rate;
	do { // a seqlock: never a half-written setting
		seq = __atomic_load_n(&shared[0], __ATOMIC_ACQUIRE);
		anchor = __atomic_load_n(&shared[1], __ATOMIC_RELAXED);
		offset = __atomic_load_n(&shared[2], __ATOMIC_RELAXED);
		rate = __atomic_load_n(&shared[3], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
	} while ((seq & 1) || seq != __atomic_load_n(&shared[0], __ATOMIC_RELAXED));
	int64_t real = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
	__int128 scaled = (__int128)(real - anchor) * rate / 1000000000;
	int64_t fake = anchor + (int64_t)scaled + offset;
	ts->tv_sec = fake / 1000000000;
	ts->tv_nsec = fake % 1000000000;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = real_clock(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
