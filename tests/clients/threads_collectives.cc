// One process, one host thread per device, every HCCL collective: the shape of the vendor's samples
// (hicann/hccl examples/01_point_to_point, 02_collectives), written for hcomm_cffi's tests.
// Built with those samples' Makefile line (g++ -std=c++14 ... -lhccl -lascendcl); run as
//   HCOMM_SIM_DEVICE_COUNT=N ./threads_collectives [repeats]
// Every rank checks what it received and prints "rank R: all collectives OK x REPEATS"; exit 0 only if all did.
// The ranks finish at different moments, so one destroys its communicator while others still wait in
// their last barrier (the HcclCommDestroy-while-others-poll case of several ranks in one process).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <atomic>
#include <thread>
#include <vector>

#include "hccl/hccl.h"
#include "hccl/hccl_types.h"
#include "acl/acl.h"

namespace {

std::atomic<int> g_failures(0);

#define CHECK_ACL(call)                                                                            \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != ACL_SUCCESS) {                                                                  \
            std::printf("rank %u: %s failed: %d (%s)\n", ctx->rank, #call, rc_, aclGetRecentErrMsg()); \
            g_failures++;                                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_HCCL(call)                                                                           \
    do {                                                                                           \
        HcclResult rc_ = (call);                                                                   \
        if (rc_ != HCCL_SUCCESS) {                                                                 \
            std::printf("rank %u: %s failed: %d (%s)\n", ctx->rank, #call, (int)rc_, aclGetRecentErrMsg()); \
            g_failures++;                                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)

struct RankContext {
    HcclRootInfo* root;
    uint32_t rank;
    uint32_t ranks;
    int repeats;
};

const uint64_t kCount = 96;   // elements per rank and per block; divisible by 2, 4 and 8

float Value(uint32_t rank, uint64_t i, int round) { return (float)(rank * 1000 + i + round); }

// device buffers of one rank
struct Buffers {
    float* send = nullptr;
    float* recv = nullptr;
    std::vector<float> host;
};

bool Expect(RankContext* ctx, const char* what, const std::vector<float>& got, const std::vector<float>& want)
{
    for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i]) {
            std::printf("rank %u: %s: element %zu is %g, expected %g\n", ctx->rank, what, i, got[i], want[i]);
            g_failures++;
            return false;
        }
    }
    return true;
}

void RankMain(RankContext* ctx)
{
    const uint32_t r = ctx->rank;
    const uint32_t n = ctx->ranks;
    const uint64_t total = kCount * n;
    const size_t bytes = total * sizeof(float);
    CHECK_ACL(aclrtSetDevice((int32_t)r));
    Buffers b;
    CHECK_ACL(aclrtMalloc((void**)&b.send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc((void**)&b.recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    b.host.resize(total);
    std::vector<float> out(total);
    HcclComm comm;
    CHECK_HCCL(HcclCommInitRootInfo(n, ctx->root, r, &comm));
    aclrtStream stream;
    CHECK_ACL(aclrtCreateStream(&stream));
    uint32_t got_rank = 99, got_size = 0;
    CHECK_HCCL(HcclGetRankId(comm, &got_rank));
    CHECK_HCCL(HcclGetRankSize(comm, &got_size));
    if (got_rank != r || got_size != n) {
        std::printf("rank %u: HcclGetRankId/Size say %u of %u\n", r, got_rank, got_size);
        g_failures++;
        return;
    }

    auto upload = [&](uint64_t count, int round) {
        for (uint64_t i = 0; i < count; ++i) b.host[i] = Value(r, i, round);
        return aclrtMemcpy(b.send, bytes, b.host.data(), count * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE);
    };
    auto download = [&](uint64_t count) {
        return aclrtMemcpy(out.data(), bytes, b.recv, count * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
    };

    for (int round = 0; round < ctx->repeats; ++round) {
        std::vector<float> want;
        // AllReduce (sum)
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclAllReduce(b.send, b.recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        want.assign(kCount, 0.0f);
        for (uint32_t p = 0; p < n; ++p)
            for (uint64_t i = 0; i < kCount; ++i) want[i] += Value(p, i, round);
        if (!Expect(ctx, "HcclAllReduce", out, want)) return;

        // Broadcast from the last rank (in place)
        const uint32_t root = n - 1;
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclBroadcast(b.send, kCount, HCCL_DATA_TYPE_FP32, root, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(aclrtMemcpy(out.data(), bytes, b.send, kCount * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
        for (uint64_t i = 0; i < kCount; ++i) want[i] = Value(root, i, round);
        if (!Expect(ctx, "HcclBroadcast", out, want)) return;

        // AllGather
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclAllGather(b.send, b.recv, kCount, HCCL_DATA_TYPE_FP32, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(total));
        want.assign(total, 0.0f);
        for (uint32_t p = 0; p < n; ++p)
            for (uint64_t i = 0; i < kCount; ++i) want[p * kCount + i] = Value(p, i, round);
        if (!Expect(ctx, "HcclAllGather", out, want)) return;

        // ReduceScatter (max): block r of the element-wise max
        CHECK_ACL(upload(total, round));
        CHECK_HCCL(HcclReduceScatter(b.send, b.recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        want.assign(kCount, 0.0f);
        for (uint64_t i = 0; i < kCount; ++i) want[i] = Value(n - 1, r * kCount + i, round);
        if (!Expect(ctx, "HcclReduceScatter", out, want)) return;

        // Reduce (sum) to rank 0
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclReduce(b.send, b.recv, kCount, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 0, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        if (r == 0) {
            CHECK_ACL(download(kCount));
            want.assign(kCount, 0.0f);
            for (uint32_t p = 0; p < n; ++p)
                for (uint64_t i = 0; i < kCount; ++i) want[i] += Value(p, i, round);
            if (!Expect(ctx, "HcclReduce", out, want)) return;
        }

        // AlltoAll: block p of my send goes to rank p
        const uint64_t block = kCount / n;
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclAlltoAll(b.send, block, HCCL_DATA_TYPE_FP32, b.recv, block, HCCL_DATA_TYPE_FP32, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        want.assign(kCount, 0.0f);
        for (uint32_t p = 0; p < n; ++p)
            for (uint64_t i = 0; i < block; ++i) want[p * block + i] = Value(p, r * block + i, round);
        if (!Expect(ctx, "HcclAlltoAll", out, want)) return;

        // AlltoAllV with uniform counts
        std::vector<uint64_t> counts(n, block), displs(n);
        for (uint32_t p = 0; p < n; ++p) displs[p] = p * block;
        CHECK_ACL(upload(kCount, round));
        CHECK_HCCL(HcclAlltoAllV(b.send, counts.data(), displs.data(), HCCL_DATA_TYPE_FP32, b.recv, counts.data(),
                                 displs.data(), HCCL_DATA_TYPE_FP32, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        if (!Expect(ctx, "HcclAlltoAllV", out, want)) return;

        // Scatter from rank 0
        CHECK_ACL(upload(total, round));
        CHECK_HCCL(HcclScatter(b.send, b.recv, kCount, HCCL_DATA_TYPE_FP32, 0, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        want.assign(kCount, 0.0f);
        for (uint64_t i = 0; i < kCount; ++i) want[i] = Value(0, r * kCount + i, round);
        if (!Expect(ctx, "HcclScatter", out, want)) return;

        // Send/Recv around the ring: even ranks send first, odd ranks receive first
        const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
        CHECK_ACL(upload(kCount, round));
        if (r % 2 == 0) {
            CHECK_HCCL(HcclSend(b.send, kCount, HCCL_DATA_TYPE_FP32, right, comm, stream));
            CHECK_HCCL(HcclRecv(b.recv, kCount, HCCL_DATA_TYPE_FP32, left, comm, stream));
        } else {
            CHECK_HCCL(HcclRecv(b.recv, kCount, HCCL_DATA_TYPE_FP32, left, comm, stream));
            CHECK_HCCL(HcclSend(b.send, kCount, HCCL_DATA_TYPE_FP32, right, comm, stream));
        }
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        for (uint64_t i = 0; i < kCount; ++i) want[i] = Value(left, i, round);
        if (!Expect(ctx, "HcclSend/HcclRecv", out, want)) return;

        // BatchSendRecv: the same ring in one call
        HcclSendRecvItem items[2];
        items[0].sendRecvType = HCCL_SEND;
        items[0].buf = b.send;
        items[0].count = kCount;
        items[0].dataType = HCCL_DATA_TYPE_FP32;
        items[0].remoteRank = right;
        items[1].sendRecvType = HCCL_RECV;
        items[1].buf = b.recv;
        items[1].count = kCount;
        items[1].dataType = HCCL_DATA_TYPE_FP32;
        items[1].remoteRank = left;
        CHECK_HCCL(HcclBatchSendRecv(items, 2, comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
        CHECK_ACL(download(kCount));
        if (!Expect(ctx, "HcclBatchSendRecv", out, want)) return;

        CHECK_HCCL(HcclBarrier(comm, stream));
        CHECK_ACL(aclrtSynchronizeStream(stream));
    }
    CHECK_HCCL(HcclCommDestroy(comm));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclrtFree(b.send));
    CHECK_ACL(aclrtFree(b.recv));
    std::printf("rank %u: all collectives OK x %d\n", r, ctx->repeats);
}

}  // namespace

int main(int argc, char** argv)
{
    int repeats = argc > 1 ? std::atoi(argv[1]) : 1;
    if (aclInit(NULL) != ACL_SUCCESS) {
        std::printf("aclInit failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    uint32_t devices = 0;
    if (aclrtGetDeviceCount(&devices) != ACL_SUCCESS || devices < 2) {
        std::printf("aclrtGetDeviceCount: %u devices (need 2 or more)\n", devices);
        return 1;
    }
    if (aclrtSetDevice(0) != ACL_SUCCESS) return 1;
    HcclRootInfo root;
    if (HcclGetRootInfo(&root) != HCCL_SUCCESS) {
        std::printf("HcclGetRootInfo failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    std::vector<RankContext> ctx(devices);
    std::vector<std::thread> threads;
    for (uint32_t d = 0; d < devices; ++d) {
        ctx[d] = RankContext{&root, d, devices, repeats};
        threads.emplace_back(RankMain, &ctx[d]);
    }
    for (auto& t : threads) t.join();
    aclFinalize();
    return g_failures.load() == 0 ? 0 : 1;
}
