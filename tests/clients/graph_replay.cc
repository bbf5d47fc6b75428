// ACL graphs through the C API, one rank per MPI process: the shape of hcomm's examples/02_aclgraphs demo
// (capture on a created stream, replay with aclmdlRIExecuteAsync), written for hcomm_cffi's tests.
// Built with the compile line of hcomm examples/01_communicators/01_one_device_per_process/Makefile
// (g++ -std=c++17 ... -lhccl -lascendcl -lmpi); run as `mpirun -n N ./graph_replay`.
// Every rank checks each step and prints "rank R: graphs OK"; exit 0 only if every check passed.
//
// What it captures, in GLOBAL mode on stream s1: an HcclAllReduce; an event fork to stream s2 (which joins the
// capture) carrying an HcclBroadcast and an aclrtMemcpyAsync; the join back to s1.  Replayed REPLAYS times
// with the output fed back as the next input.  Also: a synchronous aclrtMemcpy during the capture is refused
// (ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT) and fails it (ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED); RELAXED on this
// thread allows it; aclmdlRIExecute replays synchronously; a replay after a captured buffer was freed is refused.
#define OMPI_SKIP_MPICXX 1   // the C API of MPI only (Open MPI would otherwise need libmpi_cxx)
#include <cstdint>
#include <cstdio>
#include <vector>

#include <hccl/hccl.h>
#include <hccl/hccl_types.h>
#include <mpi.h>

namespace {

constexpr int kReplays = 3;
constexpr uint64_t kCount = 64;

int g_rank = -1;
int g_failures = 0;

bool Check(bool ok, const char* what, int rc)
{
    if (!ok) {
        std::printf("rank %d: %s (rc=%d: %s)\n", g_rank, what, rc, aclGetRecentErrMsg());
        g_failures++;
    }
    return ok;
}

bool Expect(int rc, int code, const char* what)
{
    return Check(rc == code, what, rc);
}

#define EXPECT(call, code) Expect((int)(call), (int)(code), #call)
#define ACL_OK(call) EXPECT(call, ACL_SUCCESS)
#define HCCL_OK(call) EXPECT(call, HCCL_SUCCESS)

struct Ctx {
    int rank = 0;
    int size = 0;
    HcclComm comm = nullptr;
    aclrtStream s1 = nullptr;
    aclrtStream s2 = nullptr;
    aclrtEvent fork = nullptr;
    aclrtEvent join = nullptr;
    float* a = nullptr;      // allreduce input
    float* b = nullptr;      // allreduce output, broadcast in place
    float* c = nullptr;      // async copy of b
    size_t bytes = kCount * sizeof(float);
};

void Upload(Ctx& x, float* dst, float value)
{
    std::vector<float> host(kCount, value);
    ACL_OK(aclrtMemcpy(dst, x.bytes, host.data(), x.bytes, ACL_MEMCPY_HOST_TO_DEVICE));
}

float Download(Ctx& x, const float* src)
{
    std::vector<float> host(kCount, -1.0f);
    ACL_OK(aclrtMemcpy(host.data(), x.bytes, src, x.bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (uint64_t i = 1; i < kCount; ++i) {
        if (host[i] != host[0]) {
            Check(false, "elements differ", (int)i);
        }
    }
    return host[0];
}

bool Init(Ctx& x, int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x.size);
    g_rank = x.rank;
    if (!ACL_OK(aclInit(nullptr)) || !ACL_OK(aclrtSetDevice(x.rank))) {
        return false;
    }
    HcclRootInfo root{};
    if (x.rank == 0 && !HCCL_OK(HcclGetRootInfo(&root))) {
        return false;
    }
    MPI_Bcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!HCCL_OK(HcclCommInitRootInfo(x.size, &root, x.rank, &x.comm))) {
        return false;
    }
    return ACL_OK(aclrtCreateStream(&x.s1)) && ACL_OK(aclrtCreateStream(&x.s2)) && ACL_OK(aclrtCreateEvent(&x.fork)) &&
           ACL_OK(aclrtCreateEvent(&x.join)) &&
           ACL_OK(aclrtMalloc((void**)&x.a, x.bytes, ACL_MEM_MALLOC_HUGE_ONLY)) &&
           ACL_OK(aclrtMalloc((void**)&x.b, x.bytes, ACL_MEM_MALLOC_HUGE_ONLY)) &&
           ACL_OK(aclrtMalloc((void**)&x.c, x.bytes, ACL_MEM_MALLOC_HUGE_ONLY));
}

// A synchronous copy in GLOBAL mode is refused and fails the capture; RELAXED on this thread allows it.
void CaptureRules(Ctx& x)
{
    ACL_OK(aclmdlRICaptureBegin(x.s1, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    EXPECT(aclrtMemcpy(x.c, x.bytes, x.a, x.bytes, ACL_MEMCPY_DEVICE_TO_DEVICE), ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    EXPECT(aclrtSynchronizeStream(x.s1), ACL_ERROR_RT_STREAM_CAPTURED);
    aclmdlRI model = nullptr;
    EXPECT(aclmdlRICaptureEnd(x.s1, &model), ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
    Check(model == nullptr, "an invalidated capture made a graph", 0);

    ACL_OK(aclmdlRICaptureBegin(x.s1, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    ACL_OK(aclmdlRICaptureThreadExchangeMode(&mode));
    ACL_OK(aclrtMemcpy(x.c, x.bytes, x.a, x.bytes, ACL_MEMCPY_DEVICE_TO_DEVICE));
    ACL_OK(aclmdlRICaptureThreadExchangeMode(&mode));
    Check(mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED, "the exchange did not return the previous mode", (int)mode);
    ACL_OK(aclmdlRICaptureEnd(x.s1, &model));
    ACL_OK(aclmdlRIDestroy(model));
}

aclmdlRI Capture(Ctx& x)
{
    aclmdlRI model = nullptr;
    ACL_OK(aclmdlRICaptureBegin(x.s1, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI during = nullptr;
    ACL_OK(aclmdlRICaptureGetInfo(x.s1, &status, &during));
    Check(status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && during != nullptr, "capture status is not ACTIVE", status);
    HCCL_OK(HcclAllReduce(x.a, x.b, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, x.comm, x.s1));
    ACL_OK(aclrtRecordEvent(x.fork, x.s1));
    ACL_OK(aclrtStreamWaitEvent(x.s2, x.fork));       // s2 joins the capture
    HCCL_OK(HcclBroadcast(x.b, kCount, HCCL_DATA_TYPE_FP32, 0, x.comm, x.s2));
    ACL_OK(aclrtMemcpyAsync(x.c, x.bytes, x.b, x.bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, x.s2));
    ACL_OK(aclrtRecordEvent(x.join, x.s2));
    ACL_OK(aclrtStreamWaitEvent(x.s1, x.join));
    ACL_OK(aclrtMemcpyAsync(x.a, x.bytes, x.c, x.bytes, ACL_MEMCPY_DEVICE_TO_DEVICE, x.s1));   // feed back
    ACL_OK(aclmdlRICaptureEnd(x.s1, &model));
    Check(model == during, "the graph is not the one under capture", 0);
    return model;
}

void Replay(Ctx& x)
{
    const float first = (float)(x.size * (x.size + 1) / 2);
    Upload(x, x.a, (float)(x.rank + 1));
    Upload(x, x.b, 0.0f);
    aclmdlRI model = Capture(x);
    Check(Download(x, x.b) == 0.0f, "the captured collective ran during the capture", 0);
    float expect = first;
    for (int i = 0; i < kReplays; ++i) {
        ACL_OK(aclmdlRIExecuteAsync(model, x.s1));
        ACL_OK(aclrtSynchronizeStream(x.s1));
        Check(Download(x, x.c) == expect, "a replay produced another value", i);
        expect *= (float)x.size;      // the output, broadcast and copied back, is every rank's next input
    }
    ACL_OK(aclmdlRIExecute(model, -1));
    Check(Download(x, x.c) == expect, "aclmdlRIExecute produced another value", 0);

    float* spare = nullptr;      // a captured buffer freed before the replay: refused, nothing runs
    ACL_OK(aclmdlRIDestroy(model));
    ACL_OK(aclrtMalloc((void**)&spare, x.bytes, ACL_MEM_MALLOC_HUGE_ONLY));
    ACL_OK(aclmdlRICaptureBegin(x.s1, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    HCCL_OK(HcclAllReduce(x.a, spare, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, x.comm, x.s1));
    ACL_OK(aclmdlRICaptureEnd(x.s1, &model));
    ACL_OK(aclrtFree(spare));
    EXPECT(aclmdlRIExecuteAsync(model, x.s1), ACL_ERROR_RT_PARAM_INVALID);
    ACL_OK(aclmdlRIDestroy(model));
}

void Cleanup(Ctx& x)
{
    aclrtFree(x.a);
    aclrtFree(x.b);
    aclrtFree(x.c);
    aclrtDestroyEvent(x.fork);
    aclrtDestroyEvent(x.join);
    aclrtDestroyStream(x.s1);
    aclrtDestroyStream(x.s2);
    if (x.comm != nullptr) {
        HcclCommDestroy(x.comm);
    }
    aclrtResetDevice(x.rank);
    aclFinalize();
}

}  // namespace

int main(int argc, char** argv)
{
    Ctx x;
    if (Init(x, argc, argv)) {
        CaptureRules(x);
        Replay(x);
    }
    Cleanup(x);
    int failures = 0;
    MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_failures == 0) {
        std::printf("rank %d: graphs OK\n", x.rank);
    }
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
