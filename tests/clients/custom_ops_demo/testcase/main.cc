/* The demo operators, checked: `demo [COUNT] [allgather|p2p]`.  One thread per device (as the vendor's
 * testcases), or one process per device under a launcher (mpirun: OMPI_COMM_WORLD_RANK/SIZE; hcomm run and
 * torchrun: RANK/WORLD_SIZE; the root info through HcommSimBootstrapRootInfo).  allgather: every rank's block
 * to every rank; p2p: even ranks send to the next odd rank (as the vendor's send/recv sample).  Two rounds with
 * different data per rank; every rank checks every byte it received and prints "rank R: ok", else the first
 * mismatch.  DEMO_OUTPUT_DIR: each rank's output bytes per round go to DIR/rankR.roundK.bin. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <acl/acl_rt.h>
#include <hccl/hccl_types.h>
#include <hccl_custom_demo.h>

#define CHECK(call) do { int rc_ = (call); if (rc_ != 0) { printf("rank %u: %s returned %d: %s\n", rank, #call, rc_, \
                         aclGetRecentErrMsg() ? aclGetRecentErrMsg() : ""); return 1; } } while (0)

static bool g_p2p = false;

static int Calls(uint32_t rank, uint32_t nRanks, HcclComm comm, uint64_t count)
{
    aclrtStream stream;
    CHECK(aclrtCreateStream(&stream));
    uint64_t bytes = count * sizeof(int32_t);
    void *send, *recv;
    CHECK(aclrtMalloc(&send, bytes, ACL_MEM_MALLOC_HUGE_ONLY));
    uint32_t blocks = g_p2p ? 1 : nRanks;          /* p2p: the received block; allgather: all of them */
    CHECK(aclrtMalloc(&recv, bytes * blocks, ACL_MEM_MALLOC_HUGE_ONLY));
    std::vector<int32_t> in(count), out(count * blocks);
    for (int round = 0; round < 2; round++) {
        for (uint64_t i = 0; i < count; i++) in[i] = static_cast<int32_t>(round * 1000000 + rank * 1000 + i);
        CHECK(aclrtMemcpy(send, bytes, in.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        if (!g_p2p) {
            CHECK(HcclDemoAllGather(send, recv, bytes, comm, stream));
        } else if (rank % 2 == 0 && rank + 1 < nRanks) {
            CHECK(HcclDemoSend(send, bytes, rank + 1, comm, stream));
        } else if (rank % 2 == 1) {
            CHECK(HcclDemoRecv(recv, bytes, rank - 1, comm, stream));
        }
        CHECK(aclrtSynchronizeStream(stream));
        if (g_p2p && rank % 2 == 0) continue;       /* a sender received nothing */
        CHECK(aclrtMemcpy(out.data(), bytes * blocks, recv, bytes * blocks, ACL_MEMCPY_DEVICE_TO_HOST));
        const char* dump = getenv("DEMO_OUTPUT_DIR");       /* each rank's output bytes, for comparisons */
        if (dump != nullptr) {
            char path[4096];
            snprintf(path, sizeof path, "%s/rank%u.round%d.bin", dump, rank, round);
            FILE* f = fopen(path, "wb");
            if (f == nullptr || fwrite(out.data(), 1, bytes * blocks, f) != bytes * blocks) {
                printf("rank %u: cannot write %s\n", rank, path);
                return 1;
            }
            fclose(f);
        }
        for (uint32_t b = 0; b < blocks; b++) {
            uint32_t r = g_p2p ? rank - 1 : b;        /* whose block it is */
            for (uint64_t i = 0; i < count; i++) {
                int32_t want = static_cast<int32_t>(round * 1000000 + r * 1000 + i);
                if (out[b * count + i] != want) {
                    printf("rank %u: round %d: element %llu of rank %u's block is %d, expected %d\n", rank, round,
                           static_cast<unsigned long long>(i), r, out[b * count + i], want);
                    return 1;
                }
            }
        }
    }
    CHECK(aclrtFree(send));
    CHECK(aclrtFree(recv));
    CHECK(aclrtDestroyStream(stream));
    printf("rank %u: ok\n", rank);
    return 0;
}

static int Run(uint32_t rank, uint32_t nRanks, HcclRootInfo* root, uint64_t count)
{
    CHECK(aclrtSetDevice(static_cast<int32_t>(rank)));
    HcclComm comm;
    CHECK(HcclCommInitRootInfo(nRanks, root, rank, &comm));
    int failed = Calls(rank, nRanks, comm, count);
    CHECK(HcclCommDestroy(comm));            /* also after a failure: its shared memory goes with it */
    return failed;
}

int main(int argc, char** argv)
{
    uint64_t count = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1000;
    g_p2p = argc > 2 && strcmp(argv[2], "p2p") == 0;
    const char* jobRank = getenv("OMPI_COMM_WORLD_RANK");
    const char* jobSize = getenv("OMPI_COMM_WORLD_SIZE");
    if (jobRank == nullptr || jobSize == nullptr) {        /* hcomm run, torchrun */
        jobRank = getenv("RANK");
        jobSize = getenv("WORLD_SIZE");
    }
    if (jobRank != nullptr && jobSize != nullptr) {        /* a launcher started one process per device */
        uint32_t rank = static_cast<uint32_t>(atoi(jobRank));
        uint32_t nRanks = static_cast<uint32_t>(atoi(jobSize));
        HcclRootInfo root;
        CHECK(aclrtSetDevice(static_cast<int32_t>(rank)));
        CHECK(HcommSimBootstrapRootInfo(rank, nRanks, &root));
        return Run(rank, nRanks, &root, count);
    }
    uint32_t rank = 0, nRanks = 0;
    CHECK(aclInit(nullptr));
    CHECK(aclrtGetDeviceCount(&nRanks));
    CHECK(aclrtSetDevice(0));
    HcclRootInfo root;
    CHECK(HcclGetRootInfo(&root));
    std::vector<int> results(nRanks, 1);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < nRanks; r++) {
        threads.emplace_back([&, r] { results[r] = Run(r, nRanks, &root, count); });
    }
    for (auto& t : threads) t.join();
    for (int failed : results) {
        if (failed) return 1;
    }
    return 0;
}
