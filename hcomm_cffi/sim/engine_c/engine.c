/* The emulator's compiled data plane (sim/compiled.py builds and loads it; sim/runtime.py runs it).
 *
 * hce_run runs a flat array of task records from ``start`` exactly as sim/runtime.py Executor._run_queue runs the
 * same tasks, and stops where that loop would block (a channel wait whose notify is not set: HCE_BLOCKED) or
 * before any task whose outcome it does not reproduce itself (HCE_PYTHON: Python runs that one task): a record
 * the checker must report as absorbed, a wait whose record carries another call's signature, a stamp that does
 * not match, a kind or data type it has no code for.  Notify words follow sim/notifies.py: each word has one
 * writer and is written with one plain 4-byte store (never memcpy, which stores twice).
 */
#include <stdint.h>
#include <string.h>
#include <math.h>
#ifdef __linux__
#include <errno.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#endif

enum { HCE_END = 0, HCE_BLOCKED = 1, HCE_PYTHON = 2 };
enum { E_PYTHON = 0, E_COPY = 1, E_REDUCE3 = 2, E_C_RECORD = 3, E_C_WAIT = 4, E_STAMP_WRITE = 5, E_STAMP_CHECK = 6 };
/* sim/notifies.py: VALUES and CONSUMED offsets from a notify's RECORDS word; sim/comm.py: header words */
enum { VALUES = 64, CONSUMED = 128, H_BELL = 6, H_SLEEPING = 7 };
/* enums.py DataType and ReduceOp */
enum { INT8 = 0, INT16 = 1, INT32 = 2, FP16 = 3, FP32 = 4, INT64 = 5, UINT64 = 6, UINT8 = 7, UINT16 = 8, UINT32 = 9,
       FP64 = 10, BFP16 = 11 };
enum { SUM = 0, PROD = 1, MAX = 2, MIN = 3 };

typedef struct {
    int32_t kind;        /* E_* */
    int32_t dtype;       /* E_REDUCE3: DataType */
    int32_t op;          /* E_REDUCE3: ReduceOp */
    uint32_t value;      /* E_C_RECORD: the value recorded; E_C_WAIT: the signature expected (0: any) */
    uint32_t *words;     /* E_C_RECORD: the peer's control words; E_C_WAIT: this rank's */
    int64_t index;       /* E_C_*: the notify's RECORDS word in ``words`` */
    void *dst;           /* E_COPY, E_REDUCE3: destination; E_STAMP_WRITE: this rank's stamp (int64) */
    const void *a;       /* E_COPY: source; E_REDUCE3: first operand; E_STAMP_CHECK: the peers' stamps (int64 *[]) */
    const void *b;       /* E_REDUCE3: second operand */
    int64_t count;       /* E_COPY: bytes; E_REDUCE3: elements; E_STAMP_CHECK: peers */
} hce_task;

static inline uint32_t load_acquire(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline uint32_t load_plain(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void store_release(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void store_plain(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

static void wake(uint32_t *words) {
    /* comm.py SimChannel.wake_peer: wake the peer if it sleeps on its doorbell */
    if (load_acquire(&words[H_SLEEPING])) {
#ifdef __linux__
        syscall(SYS_futex, &words[H_BELL], FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
#endif
    }
}

/* NumPy's maximum/minimum for floats: a NaN wins (the first when both are), and of equal operands (0.0 and -0.0)
 * the second (NumPy 2.x, every array length; the differential test checks it against the NumPy installed) */
#define FMAX(x, y) (((x) > (y) || (x) != (x)) ? (x) : (y))
#define FMIN(x, y) (((x) < (y) || (x) != (x)) ? (x) : (y))
#define IMAX(x, y) ((x) >= (y) ? (x) : (y))
#define IMIN(x, y) ((x) <= (y) ? (x) : (y))

#define INT_LOOP(T, U)                                                                            \
    do {                                                                                          \
        T *d = (T *)dst; const T *x = (const T *)a; const T *y = (const T *)b;                    \
        switch (op) {                                                                             \
        case SUM: for (int64_t i = 0; i < n; i++) { T p; U s = (U)x[i] + (U)y[i]; memcpy(&p, &s, sizeof p); d[i] = p; } return 1; \
        case PROD: for (int64_t i = 0; i < n; i++) { T p; U s = (U)((U)x[i] * (U)y[i]); memcpy(&p, &s, sizeof p); d[i] = p; } return 1; \
        case MAX: for (int64_t i = 0; i < n; i++) { T p = x[i], q = y[i]; d[i] = IMAX(p, q); } return 1;        \
        case MIN: for (int64_t i = 0; i < n; i++) { T p = x[i], q = y[i]; d[i] = IMIN(p, q); } return 1;        \
        default: return 0;                                                                        \
        }                                                                                         \
    } while (0)

/* Of two NaNs, which payload a sum or product keeps is the hardware's choice, and NumPy's differs with the array's
 * length (its vector loop against its scalar tail): such a reduction is left to NumPy (return 0).  Where the result
 * has a memory of its own, the sum or product is written in the same pass that looks for them (NumPy then rewrites
 * all of it from the unchanged operands); a result in place of an operand is looked for first, nothing written. */
#define FLOAT_LOOP(T)                                                                             \
    do {                                                                                          \
        T *d = (T *)dst; const T *x = (const T *)a; const T *y = (const T *)b;                    \
        if (op == SUM || op == PROD) {                                                            \
            int both = 0;                                                                         \
            if (dst != a && dst != b) {                                                           \
                if (op == SUM)                                                                    \
                    for (int64_t i = 0; i < n; i++) {                                             \
                        T p = x[i], q = y[i];                                                     \
                        both |= (p != p) & (q != q);                                              \
                        d[i] = p + q;                                                             \
                    }                                                                             \
                else                                                                              \
                    for (int64_t i = 0; i < n; i++) {                                             \
                        T p = x[i], q = y[i];                                                     \
                        both |= (p != p) & (q != q);                                              \
                        d[i] = p * q;                                                             \
                    }                                                                             \
                return !both;                                                                     \
            }                                                                                     \
            for (int64_t i = 0; i < n; i++) both |= (x[i] != x[i]) & (y[i] != y[i]);              \
            if (both) return 0;                                                                   \
        }                                                                                         \
        switch (op) {                                                                             \
        case SUM: for (int64_t i = 0; i < n; i++) d[i] = x[i] + y[i]; return 1;                   \
        case PROD: for (int64_t i = 0; i < n; i++) d[i] = x[i] * y[i]; return 1;                  \
        case MAX: for (int64_t i = 0; i < n; i++) { T p = x[i], q = y[i]; d[i] = FMAX(p, q); } return 1; \
        case MIN: for (int64_t i = 0; i < n; i++) { T p = x[i], q = y[i]; d[i] = FMIN(p, q); } return 1; \
        default: return 0;                                                                        \
        }                                                                                         \
    } while (0)

static float bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    /* kernels.py _f32_to_bf16: round to nearest even; every NaN becomes 0x7FC0 */
    uint32_t u;
    if (f != f) return 0x7FC0;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* The reductions' loops also built for AVX2 where the compiler and the C library can pick a function's version when
 * the library loads (GCC's and clang's target_clones, on ELF with ifuncs: sim/compiled.py builds with HCE_CLONES and
 * falls back without it): the baseline x86-64 build has 128-bit vectors only. */
#ifdef HCE_CLONES
#define VECTORISED __attribute__((target_clones("avx2", "default")))
#else
#define VECTORISED
#endif

/* dst = op(a, b) over n elements (kernels.py reduce3); 0: a type or op this file has no code for, or what NumPy must
 * compute (FLOAT_LOOP): it then runs the task again from the operands */
VECTORISED static int reduce3(void *dst, const void *a, const void *b, int64_t n, int32_t dtype, int32_t op) {
    switch (dtype) {
    case INT8: INT_LOOP(int8_t, uint8_t);
    case INT16: INT_LOOP(int16_t, uint16_t);
    case INT32: INT_LOOP(int32_t, uint32_t);
    case INT64: INT_LOOP(int64_t, uint64_t);
    case UINT8: INT_LOOP(uint8_t, uint8_t);
    case UINT16: INT_LOOP(uint16_t, uint16_t);
    case UINT32: INT_LOOP(uint32_t, uint32_t);
    case UINT64: INT_LOOP(uint64_t, uint64_t);
    case FP32: FLOAT_LOOP(float);
    case FP64: FLOAT_LOOP(double);
    case BFP16: {
        uint16_t *d = (uint16_t *)dst; const uint16_t *x = (const uint16_t *)a; const uint16_t *y = (const uint16_t *)b;
        if (op < SUM || op > MIN) return 0;
        for (int64_t i = 0; i < n; i++) {
            float p = bf16_to_f32(x[i]), q = bf16_to_f32(y[i]), r;
            switch (op) {
            case SUM: r = p + q; break;
            case PROD: r = p * q; break;
            case MAX: r = FMAX(p, q); break;
            default: r = FMIN(p, q); break;
            }
            d[i] = f32_to_bf16(r);
        }
        return 1;
    }
    default:
        return 0;
    }
}

#define MAX_UNWOKEN 64
#define MAX_STAMPS_PER_RUN 64   /* compiled.py MAX_STAMPS */

/* Run tasks[start:n]; returns the index reached, with out[0] = HCE_END / HCE_BLOCKED / HCE_PYTHON and out[1] = the
 * stamps consumed (the queue's stamp FIFO, whose first ``nstamps`` values are ``stamps``, pops that many). */
int64_t hce_run(const hce_task *tasks, int64_t n, int64_t start, const int64_t *stamps, int64_t nstamps,
                int64_t *out) {
    uint32_t *unwoken[MAX_UNWOKEN];
    int nunwoken = 0;
    int64_t popped = 0;
    int status = HCE_END;
    int64_t k = start;
    for (; k < n; k++) {
        const hce_task *t = &tasks[k];
        if (nunwoken && t->kind != E_C_RECORD) {   /* runtime.py _wake_peers: when a run of records ends */
            for (int j = 0; j < nunwoken; j++) wake(unwoken[j]);
            nunwoken = 0;
        }
        switch (t->kind) {
        case E_COPY:
            memmove(t->dst, t->a, (size_t)t->count);
            break;
        case E_REDUCE3:
            if (!reduce3(t->dst, t->a, t->b, t->count, t->dtype, t->op)) { status = HCE_PYTHON; goto done; }
            break;
        case E_C_WAIT: {
            uint32_t *w = t->words + t->index;
            uint32_t records = load_acquire(w);
            if (records == load_plain(w + CONSUMED)) { status = HCE_BLOCKED; goto done; }
            uint32_t got = load_acquire(w + VALUES);
            if (t->value && got != t->value) { status = HCE_PYTHON; goto done; }   /* Python names the mismatch */
            store_release(w + CONSUMED, records);
            break;
        }
        case E_C_RECORD: {
            uint32_t *w = t->words + t->index;
            uint32_t records = load_plain(w);
            if (records != load_acquire(w + CONSUMED)) { status = HCE_PYTHON; goto done; }   /* absorbed: reported */
            if (nunwoken == MAX_UNWOKEN) {
                for (int j = 0; j < nunwoken; j++) wake(unwoken[j]);
                nunwoken = 0;
            }
            store_release(w + VALUES, t->value);
            store_release(w, records + 1u);
            uint32_t *bell = t->words + H_BELL;          /* comm.py SimChannel.ring_peer */
            store_release(bell, load_plain(bell) + 1u);
            unwoken[nunwoken++] = t->words;
            break;
        }
        case E_STAMP_WRITE:
            if (popped >= nstamps) { status = HCE_PYTHON; goto done; }
            __atomic_store_n((int64_t *)t->dst, stamps[popped] + 1, __ATOMIC_RELEASE);
            break;
        case E_STAMP_CHECK: {
            if (popped >= nstamps) { status = HCE_PYTHON; goto done; }
            int64_t want = stamps[popped] + 1;
            int64_t *const *peers = (int64_t *const *)t->a;
            for (int64_t j = 0; j < t->count; j++)
                if (__atomic_load_n(peers[j], __ATOMIC_ACQUIRE) != want) { status = HCE_PYTHON; goto done; }
            popped++;
            break;
        }
        default:
            status = HCE_PYTHON;
            goto done;
        }
    }
done:
    for (int j = 0; j < nunwoken; j++) wake(unwoken[j]);
    out[0] = status;
    out[1] = popped;
    return k;
}

/* A stream's replay ring (sim/compiled.py Ring): the compiled task lists of repeated calls launched on a queue with no
 * Python tasks pending, run from its head in launch order.  Each segment carries its chunk stamps as a range:
 * stamp0, stamp0 + 1, ..., of which ``popped`` are consumed, and the id of its list (Python maps it back). */
typedef struct {
    const hce_task *tasks;
    int64_t n, at;               /* its records, and the next to run */
    int64_t stamp0, stamps, popped;
    int64_t pid;                 /* sim/compiled.py Program.pid */
} hce_seg;

typedef struct {
    hce_seg *segs;
    int64_t cap, head, count;
    int64_t left;                /* the tasks its segments hold not yet run */
} hce_ring;

/* Run the ring from its head until a segment blocks or hands a task to Python (it stays at the head), or the ring is
 * empty; returns the tasks run, with out[0] = the status (HCE_END: empty). */
int64_t hce_drain(hce_ring *r, int64_t *out) {
    int64_t ran = 0, stamps[MAX_STAMPS_PER_RUN], o[2];
    int status = HCE_END;
    while (r->count) {
        hce_seg *s = &r->segs[r->head];
        int64_t k = s->stamps - s->popped;
        if (k > MAX_STAMPS_PER_RUN) k = MAX_STAMPS_PER_RUN;
        for (int64_t i = 0; i < k; i++) stamps[i] = s->stamp0 + s->popped + i;
        int64_t reached = hce_run(s->tasks, s->n, s->at, stamps, k, o);
        ran += reached - s->at;
        s->at = reached;
        s->popped += o[1];
        if (reached < s->n) { status = (int)o[0]; break; }
        r->head = r->head + 1 == r->cap ? 0 : r->head + 1;
        r->count--;
    }
    r->left -= ran;
    out[0] = status;
    return ran;
}

/* A repeated native call (sim/compiled.py Repeat): its whole compiled lists per parity of its communicator's chunk
 * count, the ring of its stream, and where its communicator counts chunks (sim/native.py NativeState.seq) and
 * announces its library calls (sim/announce.py: entry k of the table at note[base + (k % entries) * 3]). */
typedef struct {
    hce_ring *ring;
    int64_t *seq;                /* the communicator's chunks issued; the call's parity is its low bit */
    int64_t *number;             /* the communicator's library calls announced */
    uint32_t *note;              /* this rank's announcement table */
    int64_t base, entries;
    const hce_task *tasks[2];    /* per parity (n 0: none kept) */
    int64_t n[2], pid[2];
    int64_t advance;             /* chunks per call */
    int64_t stamps;              /* chunk stamps per call (advance, or 0: unstamped) */
    uint32_t value;              /* its signature */
} hce_entry;

/* Launch the call ``e`` as Python's full path would (sim/native.py NativeCollectives.repeat): its announcement
 * (mark, value, mark; the first word cleared while the others change), its chunks counted, its list appended to the
 * ring with its chunk stamps, then the ring drained (hce_drain).  Returns the tasks run * 4 + the status, or -1 when
 * no list is kept for this parity and -2 when the ring is full (nothing done: the caller takes another path). */
int64_t hce_enter(hce_entry *e) {
    hce_ring *r = e->ring;
    int64_t seq = *e->seq;
    int p = (int)(seq & 1);
    if (!e->n[p]) return -1;
    if (r->count == r->cap) return -2;
    int64_t number = *e->number;
    uint32_t mark = (uint32_t)(number + 1);
    uint32_t *w = e->note + e->base + (number % e->entries) * 3;
    store_release(&w[0], 0u);
    store_release(&w[1], e->value);
    store_release(&w[2], mark);
    store_release(&w[0], mark);
    *e->number = number + 1;
    *e->seq = seq + e->advance;
    int64_t tail = r->head + r->count;
    hce_seg *s = &r->segs[tail >= r->cap ? tail - r->cap : tail];
    s->tasks = e->tasks[p];
    s->n = e->n[p];
    s->at = 0;
    s->stamp0 = seq;
    s->stamps = e->stamps;
    s->popped = 0;
    s->pid = e->pid[p];
    r->count++;
    r->left += s->n;
    int64_t out[1];
    int64_t ran = hce_drain(r, out);
    return ran * 4 + out[0];
}

static inline int recorded(const hce_task *t) {   /* an E_C_WAIT's notify holds a record not yet consumed */
    const uint32_t *w = t->words + t->index;
    return load_acquire(w) != load_plain(w + CONSUMED);
}

/* Wait until each of the channel waits waits[0..n) (E_C_WAIT records, run in a row: no record of this rank comes
 * between them) finds its record (runtime.py Executor._poll_heads, then _sleep, for all of them in one call): up to
 * ``spins`` looks with sched_yield between them, then futex sleeps on the doorbell ctl[H_BELL] that every record into
 * this rank rings, for at most ``timeout_ns`` in all.  Returns 1 when every record is there, 0 otherwise (timed out
 * or a signal): the caller looks again. */
int hce_wait(const hce_task *waits, int64_t n, uint32_t *ctl, int spins, int64_t timeout_ns) {
    int64_t k = 0;
    int looks = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        while (k < n && recorded(&waits[k])) k++;
        if (k == n) return 1;
        if (looks < spins) {
            looks++;
            sched_yield();
            continue;
        }
        uint32_t bell = load_acquire(&ctl[H_BELL]);   /* read before the last look: a record after it changes it */
        if (recorded(&waits[k])) continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t left = timeout_ns - ((int64_t)(now.tv_sec - t0.tv_sec) * 1000000000 + (now.tv_nsec - t0.tv_nsec));
        if (left <= 0) return 0;
#ifdef __linux__
        struct timespec ts = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
        store_release(&ctl[H_SLEEPING], 1u);
        long rc = syscall(SYS_futex, &ctl[H_BELL], FUTEX_WAIT, bell, &ts, NULL, 0);
        store_release(&ctl[H_SLEEPING], 0u);
        if (rc != 0 && errno == EINTR) return recorded(&waits[k]) && k + 1 == n;   /* a signal: Python's turn */
#else
        return 0;
#endif
    }
}

/* Drain the ring (hce_drain), waiting in C (hce_wait) whenever its head is a run of channel waits on this rank's
 * control words ``ctl`` (sim/runtime.py Executor._wait_ring while this thread is the only one that could touch the
 * ring), until the ring is empty (out[0] = HCE_END), its head is a task for Python (HCE_PYTHON) or anything but such
 * a run (HCE_BLOCKED), a wait returned early (a signal) or ``timeout_ns`` passed (HCE_BLOCKED).  Returns the tasks
 * run. */
int64_t hce_sync(hce_ring *r, uint32_t *ctl, int spins, int64_t timeout_ns, int64_t *out) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t ran = 0, o[1];
    for (;;) {
        ran += hce_drain(r, o);
        out[0] = o[0];
        if (o[0] != HCE_BLOCKED) return ran;
        const hce_seg *s = &r->segs[r->head];
        const hce_task *t = &s->tasks[s->at];
        int64_t n = 0;
        while (s->at + n < s->n && t[n].kind == E_C_WAIT && t[n].words == ctl) n++;
        if (!n) return ran;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t left = timeout_ns - ((int64_t)(now.tv_sec - t0.tv_sec) * 1000000000 + (now.tv_nsec - t0.tv_nsec));
        if (left <= 0 || !hce_wait(t, n, ctl, spins, left)) return ran;
    }
}
