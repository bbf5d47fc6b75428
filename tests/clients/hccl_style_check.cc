// The project's own program in the style of the vendor's hccl_test (not its code): MPI ranks, the root info
// broadcast with MPI_Ibcast, events around a timed loop, a stream held by an ACL_EVENT_SYNC event, the VMM
// zero-copy path and the profiler calls.  Built with hccl_test's compile and link line
// (g++ -std=c++11 -Werror ... -lhccl -lacl_rt -lmpi -lmsprofiler) by tests/test_hccl_test_style.py.
//   usage: mpirun -n N hccl_style_check PROFILE_DIR ZERO_COPY(0|1)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "hccl/hccl.h"
#include "hccl/hccl_types.h"
#include "acl/acl.h"
#include "acl/acl_prof.h"
#include "mpi.h"

#define ACL_OK(cmd)                                                                                   \
    do {                                                                                              \
        aclError rc_ = (cmd);                                                                         \
        if (rc_ != ACL_SUCCESS) {                                                                     \
            printf("rank %d: %s failed: %d (%s)\n", g_rank, #cmd, rc_, aclGetRecentErrMsg());       \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)
#define HCCL_OK(cmd)                                                                                  \
    do {                                                                                              \
        HcclResult rc_ = (cmd);                                                                       \
        if (rc_ != HCCL_SUCCESS) {                                                                    \
            printf("rank %d: %s failed: %d (%s)\n", g_rank, #cmd, (int)rc_, aclGetRecentErrMsg());  \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)
#define EXPECT(cond, what)                                                                            \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            printf("rank %d: expected %s (%s)\n", g_rank, what, aclGetRecentErrMsg());               \
            return 1;                                                                                 \
        }                                                                                             \
    } while (0)

static int g_rank = 0;
static const uint64_t kCount = 4096;

static int check_sum(void *dev, int n, float scale)
{
    std::vector<float> host(kCount);
    ACL_OK(aclrtMemcpy(host.data(), kCount * sizeof(float), dev, kCount * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
    float want = scale * n * (n + 1) / 2.0f;
    for (uint64_t i = 0; i < kCount; ++i) {
        if (host[i] != want) {
            printf("rank %d: element %llu is %f, expected %f\n", g_rank, (unsigned long long)i, host[i], want);
            return 1;
        }
    }
    return 0;
}

static int fill(void *dev, float value)
{
    std::vector<float> host(kCount, value);
    ACL_OK(aclrtMemcpy(dev, kCount * sizeof(float), host.data(), kCount * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE));
    return 0;
}

// events around a timed loop, as hccl_test times its iterations
static int timed_loop(HcclComm comm, aclrtStream stream, void *send, void *recv, int n, float *ms)
{
    aclrtEvent start, end;
    ACL_OK(aclrtCreateEvent(&start));
    ACL_OK(aclrtCreateEvent(&end));
    ACL_OK(aclrtRecordEvent(start, stream));
    for (int i = 0; i < 5; ++i) {
        HCCL_OK(HcclAllReduce(send, recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    }
    ACL_OK(aclrtRecordEvent(end, stream));
    ACL_OK(aclrtSynchronizeStream(stream));
    ACL_OK(aclrtEventElapsedTime(ms, start, end));
    EXPECT(*ms > 0.0f, "a positive elapsed time between the two records");
    ACL_OK(aclrtDestroyEvent(start));
    ACL_OK(aclrtDestroyEvent(end));
    return check_sum(recv, n, 1.0f);
}

// hccl_test -t 1: the stream waits for an ACL_EVENT_SYNC event that another stream records later
static int held_stream(HcclComm comm, aclrtStream stream, void *send, void *recv, int n)
{
    aclrtStream other;
    aclrtEvent gate;
    ACL_OK(aclrtCreateStream(&other));
    ACL_OK(aclrtCreateEventWithFlag(&gate, ACL_EVENT_SYNC));
    ACL_OK(aclrtStreamWaitEvent(stream, gate));
    ACL_OK(aclrtResetEvent(gate, stream));
    HCCL_OK(HcclAllReduce(send, recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    aclError held = aclrtSynchronizeStreamWithTimeout(stream, 300);
    EXPECT(held == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "the held stream not to finish before the event is recorded");
    ACL_OK(aclrtRecordEvent(gate, other));
    ACL_OK(aclrtSynchronizeStream(stream));
    ACL_OK(aclrtDestroyEvent(gate));
    ACL_OK(aclrtDestroyStream(other));
    return check_sum(recv, n, 2.0f);
}

// hccl_test -z 1: buffers in reserved, mapped physical memory activated for the communicator
static int zero_copy(HcclComm comm, aclrtStream stream, int n, int device)
{
    aclrtPhysicalMemProp prop = {ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_HBM_MEM_HUGE,
                                 {(uint32_t)device, ACL_MEM_LOCATION_TYPE_DEVICE}, 0};
    size_t granularity = 0;
    ACL_OK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &granularity));
    size_t reserve = 2 * granularity;
    void *base = nullptr;
    aclrtDrvMemHandle handle;
    ACL_OK(aclrtReserveMemAddress(&base, reserve, 0, nullptr, 1));
    EXPECT(aclrtMallocPhysical(&handle, granularity + 1, &prop, 0) == ACL_ERROR_RT_PARAM_INVALID,
           "a size that is not a multiple of the granularity refused");
    ACL_OK(aclrtMallocPhysical(&handle, reserve, &prop, 0));
    ACL_OK(aclrtMapMem(base, reserve, 0, handle, 0));
    EXPECT(aclrtMapMem(base, granularity, 0, handle, 0) == ACL_ERROR_RT_PARAM_INVALID, "a double map refused");
    HCCL_OK(HcclCommSetMemoryRange(comm, base, reserve, 0, 0));
    HCCL_OK(HcclCommActivateCommMemory(comm, base, reserve, 0, handle, 0));
    void *send = base;
    void *recv = (char *)base + granularity;
    if (fill(send, (float)(g_rank + 1) * 3.0f) != 0) return 1;
    HCCL_OK(HcclAllReduce(send, recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    ACL_OK(aclrtSynchronizeStream(stream));
    if (check_sum(recv, n, 3.0f) != 0) return 1;
    HCCL_OK(HcclCommDeactivateCommMemory(comm, base));
    EXPECT(aclrtReleaseMemAddress(base) == ACL_ERROR_RT_PARAM_INVALID, "releasing a still-mapped range refused");
    ACL_OK(aclrtUnmapMem(base));
    ACL_OK(aclrtFreePhysical(handle));
    EXPECT(aclrtFreePhysical(handle) == ACL_ERROR_RT_PARAM_INVALID, "a freed handle refused");
    HCCL_OK(HcclCommUnsetMemoryRange(comm, base));
    ACL_OK(aclrtReleaseMemAddress(base));
    return 0;
}

int main(int argc, char *argv[])
{
    MPI_Init(&argc, &argv);
    int n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 3) {
        printf("usage: %s PROFILE_DIR ZERO_COPY\n", argv[0]);
        return 2;
    }
    int rc = 1;
    ACL_OK(aclInit(nullptr));
    ACL_OK(aclrtSetDevice(g_rank));
    const char *soc = aclrtGetSocName();
    EXPECT(soc != nullptr && strncmp(soc, "Ascend910", 9) == 0, "a real SoC name");

    // the profiler around everything below, as hccl_test with HCCL_TEST_PROFILING=1
    ACL_OK(aclprofInit(argv[1], strlen(argv[1])));
    uint32_t devices[1] = {(uint32_t)g_rank};
    aclprofConfig *config = aclprofCreateConfig(devices, 1, ACL_AICORE_PIPE_UTILIZATION, nullptr,
                                                ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_HCCL_TRACE);
    EXPECT(config != nullptr, "a profiling config");
    ACL_OK(aclprofStart(config));

    HcclRootInfo root;
    MPI_Request request;
    MPI_Status status;
    if (g_rank == 0) {
        HCCL_OK(HcclGetRootInfo(&root));
    }
    MPI_Ibcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD, &request);
    MPI_Wait(&request, &status);
    HcclComm comm;
    HCCL_OK(HcclCommInitRootInfo(n, &root, g_rank, &comm));
    aclrtStream stream;
    ACL_OK(aclrtCreateStream(&stream));
    ACL_OK(aclrtSetStreamFailureMode(stream, 1));

    void *send = nullptr, *recv = nullptr;
    ACL_OK(aclrtMalloc(&send, kCount * sizeof(float), ACL_MEM_MALLOC_HUGE_ONLY));
    ACL_OK(aclrtMalloc(&recv, kCount * sizeof(float), ACL_MEM_MALLOC_HUGE_ONLY));
    float ms = 0.0f;
    if (fill(send, (float)(g_rank + 1)) != 0 || timed_loop(comm, stream, send, recv, n, &ms) != 0) goto out;
    if (fill(send, (float)(g_rank + 1) * 2.0f) != 0 || held_stream(comm, stream, send, recv, n) != 0) goto out;
    if (atoi(argv[2]) == 1 && zero_copy(comm, stream, n, g_rank) != 0) goto out;
    printf("rank %d: OK soc=%s elapsed_ms=%.3f\n", g_rank, soc, ms);
    rc = 0;
out:
    aclrtFree(send);
    aclrtFree(recv);
    aclrtDestroyStream(stream);
    HcclCommDestroy(comm);
    ACL_OK(aclprofStop(config));
    ACL_OK(aclprofDestroyConfig(config));
    ACL_OK(aclprofFinalize());
    aclrtResetDevice(g_rank);
    aclFinalize();
    MPI_Finalize();
    return rc;
}
