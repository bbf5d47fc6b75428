/* ring_allreduce.c: a ring allreduce (float32 sum) written against the HCCL/HCOMM C API.
 *
 * The shape is that of the vendor's custom-operator samples (hccl repository @ 09300b7,
 * examples/05_custom_ops_allgather/aicpu/op_host/allgather.cc and op_kernel_aicpu/exec_op.cc;
 * resources explained in hcomm docs/zh/comm_op_dev_guide/aicpu_comm_op_dev/create_res.md @ 8958adb):
 * a thread bound to the user stream plus worker threads from HcclThreadAcquire, one channel per
 * neighbour from HcclChannelAcquire, the peer's HCCL buffer from HcclChannelGetHcclBuffer, and the
 * data plane as Hcomm*OnThread tasks with the two-flag handshake (ACK = "my landing slot is free",
 * DATA = "the block is there").  Here the tasks are issued from the host (engine CPU_TS) instead of
 * an AICPU kernel, so the program runs as is on the hcomm_cffi emulator and on a CANN host build.
 *
 * Per step of the 2(N-1) ring steps, thread B frees its slot (ACK to the left neighbour), waits for
 * DATA, reduces (reduce-scatter half) or copies (allgather half) the block out of its HCCL buffer
 * and tells thread A the block is ready; thread A waits for the right neighbour's ACK and for B,
 * writes the block into the right neighbour's HCCL buffer and records DATA there.
 *
 * Run:   hcomm run -n 4 -- ./ring_allreduce [COUNT] [--bad-schedule]
 * RANK / WORLD_SIZE / LOCAL_RANK come from the launcher (hcomm run, torchrun or mpirun); the root
 * info is exchanged with HcommSimBootstrapRootInfo on the emulator (on CANN: MPI_Bcast, see
 * docs/guide/vendor-programs.md).  --bad-schedule records one notify nobody waits for: the emulator's strict
 * checker (HCOMM_SIM_CHECK=strict) reports it and the stream synchronisation fails.
 */
#include <hccl/hccl.h>
#include <hcomm/hcomm_primitives.h>
#include <acl/acl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ACK = 0, DATA = 1 };                    /* channel notifies */
enum { FROM_B = 0, FORK_A = 1 };               /* notifies of thread A */
enum { FORK_B = 0, FROM_A = 1 };               /* notifies of thread B */
enum { JOIN_A = 0, JOIN_B = 1 };               /* notifies of the main thread */
#define WAIT_S 30u

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int rc_ = (int)(call);                                                               \
        if (rc_ != 0) {                                                                      \
            const char *msg_ = aclGetRecentErrMsg();                                         \
            fprintf(stderr, "rank %u: %s failed with code %d: %s\n", g_rank, #call, rc_,     \
                    msg_ ? msg_ : "(no message)");                                           \
            return rc_;                                                                      \
        }                                                                                    \
    } while (0)

static uint32_t g_rank;

static uint32_t env_u32(const char *name, uint32_t fallback)
{
    const char *v = getenv(name);
    return v && *v ? (uint32_t)strtoul(v, NULL, 10) : fallback;
}

/* One allreduce: issue every task, then wait for the stream. */
static int ring_allreduce(HcclComm comm, aclrtStream stream, ThreadHandle main_thread, ThreadHandle a,
                          ThreadHandle b, ChannelHandle ch_left, ChannelHandle ch_right, char *slot,
                          char *right_slot, char *x, char *y, uint64_t blk, uint32_t n, int bad_schedule)
{
    uint64_t nbytes = blk * sizeof(float);
    uint32_t step, steps = 2 * (n - 1);
    (void)comm;
    CHECK(HcommBatchModeStart("ring"));
    CHECK(HcommLocalCopyOnThread(main_thread, y, x, nbytes * n));
    CHECK(HcommThreadNotifyRecordOnThread(main_thread, a, FORK_A));          /* fork */
    CHECK(HcommThreadNotifyRecordOnThread(main_thread, b, FORK_B));
    CHECK(HcommThreadNotifyWaitOnThread(a, FORK_A, WAIT_S));
    CHECK(HcommThreadNotifyWaitOnThread(b, FORK_B, WAIT_S));
    for (step = 0; step < steps; step++) {
        uint32_t send_blk, recv_blk;
        if (step < n - 1) {
            send_blk = (g_rank + n - step) % n;
            recv_blk = (g_rank + 2 * n - step - 1) % n;
        } else {
            uint32_t s = step - (n - 1);
            send_blk = (g_rank + 1 + n - s) % n;
            recv_blk = (g_rank + n - s) % n;
        }
        /* thread B: free my slot, take the block from the left neighbour */
        CHECK(HcommChannelNotifyRecordOnThread(b, ch_left, ACK));
        CHECK(HcommChannelNotifyWaitOnThread(b, ch_left, DATA, WAIT_S));
        if (step < n - 1)
            CHECK(HcommLocalReduceOnThread(b, y + recv_blk * nbytes, slot, blk, HCOMM_DATA_TYPE_FP32,
                                           HCOMM_REDUCE_SUM));
        else
            CHECK(HcommLocalCopyOnThread(b, y + recv_blk * nbytes, slot, nbytes));
        if (step < steps - 1) {
            if (step > 0)
                CHECK(HcommThreadNotifyWaitOnThread(b, FROM_A, WAIT_S));     /* A took my last "ready" */
            CHECK(HcommThreadNotifyRecordOnThread(b, a, FROM_B));
        }
        /* thread A: wait for the right neighbour's free slot, forward the block */
        CHECK(HcommChannelNotifyWaitOnThread(a, ch_right, ACK, WAIT_S));
        if (step > 0) {
            CHECK(HcommThreadNotifyWaitOnThread(a, FROM_B, WAIT_S));
            if (step < steps - 1)
                CHECK(HcommThreadNotifyRecordOnThread(a, b, FROM_A));
        }
        CHECK(HcommWriteOnThread(a, ch_right, right_slot, y + send_blk * nbytes, nbytes));
        CHECK(HcommChannelNotifyRecordOnThread(a, ch_right, DATA));
    }
    CHECK(HcommThreadNotifyRecordOnThread(a, main_thread, JOIN_A));          /* join */
    CHECK(HcommThreadNotifyRecordOnThread(b, main_thread, JOIN_B));
    CHECK(HcommThreadNotifyWaitOnThread(main_thread, JOIN_A, WAIT_S));
    CHECK(HcommThreadNotifyWaitOnThread(main_thread, JOIN_B, WAIT_S));
    if (bad_schedule)
        CHECK(HcommThreadNotifyRecordOnThread(main_thread, main_thread, JOIN_A));   /* never waited on */
    CHECK(HcommBatchModeEnd("ring"));
    CHECK(aclrtSynchronizeStream(stream));
    return 0;
}

static int run(uint64_t count, int bad_schedule)
{
    uint32_t n = env_u32("WORLD_SIZE", 1), local_rank = env_u32("LOCAL_RANK", g_rank);
    uint32_t left = (g_rank + n - 1) % n, right = (g_rank + 1) % n, npeers, i;
    uint64_t blk = count / n, bytes, buf_size, right_size;
    HcclRootInfo root;
    HcclComm comm;
    aclrtStream stream;
    ThreadHandle main_thread, workers[2];
    HcclChannelDesc descs[2];
    ChannelHandle channels[2], ch_left, ch_right;
    void *slot, *right_slot, *dev_x, *dev_y;
    float *host;
    int bad = 0;

    if (n < 2 || blk == 0) {
        fprintf(stderr, "rank %u: needs WORLD_SIZE >= 2 and COUNT >= WORLD_SIZE (got %u, %llu)\n", g_rank, n,
                (unsigned long long)count);
        return 1;
    }
    bytes = blk * n * sizeof(float);
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice((int32_t)local_rank));           /* HcclGetRootInfo needs a device */
    CHECK(HcommSimBootstrapRootInfo(g_rank, n, &root));   /* on CANN: HcclGetRootInfo + MPI_Bcast */
    CHECK(HcclCommInitRootInfo(n, &root, g_rank, &comm));
    CHECK(aclrtCreateStream(&stream));

    /* resources: a thread on the user stream, two workers, a channel to each neighbour */
    CHECK(HcclThreadAcquireWithStream(comm, COMM_ENGINE_CPU_TS, stream, 2, &main_thread));
    CHECK(HcclThreadAcquire(comm, COMM_ENGINE_CPU_TS, 2, 2, workers));
    npeers = left == right ? 1 : 2;
    CHECK(HcclChannelDescInit(descs, npeers));
    descs[0].remoteRank = left;
    descs[1].remoteRank = right;
    for (i = 0; i < npeers; i++) {
        descs[i].channelProtocol = COMM_PROTOCOL_HCCS;
        descs[i].notifyNum = 2;
    }
    CHECK(HcclChannelAcquire(comm, COMM_ENGINE_CPU_TS, descs, npeers, channels));
    ch_left = channels[0];
    ch_right = channels[npeers - 1];
    CHECK(HcclGetHcclBuffer(comm, &slot, &buf_size));
    CHECK(HcclChannelGetHcclBuffer(comm, ch_right, &right_slot, &right_size));
    if (blk * sizeof(float) > buf_size || blk * sizeof(float) > right_size) {
        fprintf(stderr, "rank %u: a block of %llu bytes does not fit the HCCL buffer (%llu bytes)\n", g_rank,
                (unsigned long long)(blk * sizeof(float)), (unsigned long long)buf_size);
        return 1;
    }

    /* data: x[i] = (i % 97) * (rank + 1) on the device; the sum over ranks is exact in float32 */
    host = (float *)malloc(bytes);
    for (i = 0; i < blk * n; i++)
        host[i] = (float)(i % 97) * (float)(g_rank + 1);
    CHECK(aclrtMalloc(&dev_x, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dev_y, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(dev_x, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(ring_allreduce(comm, stream, main_thread, workers[0], workers[1], ch_left, ch_right, (char *)slot,
                         (char *)right_slot, (char *)dev_x, (char *)dev_y, blk, n, bad_schedule));
    CHECK(aclrtMemcpy(host, bytes, dev_y, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < blk * n; i++) {
        float expect = (float)(i % 97) * (float)(n * (n + 1) / 2);
        if (host[i] != expect) {
            fprintf(stderr, "rank %u: y[%u] = %g, expected %g\n", g_rank, i, host[i], expect);
            bad = 1;
            break;
        }
    }
    free(host);
    CHECK(aclrtFree(dev_x));
    CHECK(aclrtFree(dev_y));
    CHECK(aclrtDestroyStream(stream));
    CHECK(HcclCommDestroy(comm));
    CHECK(aclrtResetDevice((int32_t)local_rank));
    CHECK(aclFinalize());
    if (!bad)
        printf("rank %u: ring allreduce of %llu floats on %u ranks OK\n", g_rank, (unsigned long long)(blk * n), n);
    return bad;
}

int main(int argc, char **argv)
{
    uint64_t count = 1u << 16;
    int bad_schedule = 0, i;
    g_rank = env_u32("RANK", 0);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bad-schedule") == 0)
            bad_schedule = 1;
        else
            count = strtoull(argv[i], NULL, 10);
    }
    return run(count, bad_schedule) == 0 ? 0 : 1;
}
