/* The host side of a custom operator in the shape of the vendor's samples (hicann/hccl
 * examples/04_custom_ops_p2p/op_host, 05_custom_ops_allgather/aicpu/op_host), written for hcomm_cffi's
 * tests: the stream becomes a CPU_TS thread exported to AICPU_TS, an AICPU_TS thread is exported to
 * CPU_TS, the resources live in an engine context (HcclEngineCtxGet first, HcclEngineCtxCreate when it is
 * missing), and the launch records the AICPU thread's notify from the host BEFORE the kernel's batch waits
 * on it -- the rank is idle in between, which is where a checker must not clear the notify.
 * Prints "custom op OK" and exits 0 when the kernel's copy arrived. */
#include <stdio.h>
#include <string.h>

#include <acl/acl.h>
#include <hccl/hccl.h>
#include <hccl/hccl_res.h>
#include <hccl/hccl_res_expt.h>
#include <hccl/hcomm_primitives.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        int rc_ = (int)(call);                                                        \
        if (rc_ != 0) {                                                               \
            fprintf(stderr, "%s failed: %d (%s)\n", #call, rc_, aclGetRecentErrMsg()); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

typedef struct {
    ThreadHandle cpu;            /* the stream's thread */
    ThreadHandle cpuOnAicpu;     /* ... as the AICPU engine sees it */
    ThreadHandle aicpu;          /* the kernel's thread */
    ThreadHandle aicpuOnCpu;     /* ... as the host engine sees it */
} OpResources;

int main(void)
{
    enum { N = 256 };
    HcclRootInfo root;
    HcclComm comm;
    aclrtStream stream;
    OpResources res, *ctx = NULL;
    void *raw = NULL, *src = NULL, *dst = NULL;
    uint64_t size = 0;
    float host[N];
    int i, found;

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(HcclGetRootInfo(&root));
    CHECK(HcclCommInitRootInfo(1, &root, 0, &comm));
    CHECK(aclrtCreateStream(&stream));

    found = HcclEngineCtxGet(comm, "custom_p2p", COMM_ENGINE_CPU_TS, &raw, &size);
    if (found != HCCL_E_NOT_FOUND) {
        fprintf(stderr, "HcclEngineCtxGet of a new tag returned %d, expected HCCL_E_NOT_FOUND\n", found);
        return 1;
    }
    CHECK(HcclThreadAcquireWithStream(comm, COMM_ENGINE_CPU_TS, stream, 1, &res.cpu));
    CHECK(HcclThreadExportToCommEngine(comm, 1, &res.cpu, COMM_ENGINE_AICPU_TS, &res.cpuOnAicpu));
    CHECK(HcclThreadAcquire(comm, COMM_ENGINE_AICPU_TS, 1, 1, &res.aicpu));
    CHECK(HcclThreadExportToCommEngine(comm, 1, &res.aicpu, COMM_ENGINE_CPU_TS, &res.aicpuOnCpu));
    CHECK(HcclEngineCtxCreate(comm, "custom_p2p", COMM_ENGINE_CPU_TS, sizeof(OpResources), &raw));
    CHECK(HcclEngineCtxCopy(comm, COMM_ENGINE_CPU_TS, "custom_p2p", &res, sizeof(OpResources), 0));
    CHECK(HcclEngineCtxGet(comm, "custom_p2p", COMM_ENGINE_CPU_TS, (void **)&ctx, &size));
    if ((void *)ctx != raw || size != sizeof(OpResources) || ctx->aicpu != res.aicpu) {
        fprintf(stderr, "the engine context does not hold what was copied into it\n");
        return 1;
    }

    for (i = 0; i < N; i++) host[i] = (float)i * 0.5f;
    CHECK(aclrtMalloc(&src, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&dst, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMemcpy(src, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE));

    /* launch: the host tells the kernel's thread to start */
    CHECK(HcommBatchModeStart("launch"));
    CHECK(HcommThreadNotifyRecordOnThread(ctx->cpu, ctx->aicpuOnCpu, 0));
    CHECK(HcommBatchModeEnd("launch"));
    CHECK(aclrtSynchronizeStream(stream));         /* every thread of the rank is idle now */

    /* the kernel: wait for the launch, copy, tell the host it is done */
    CHECK(HcommBatchModeStart("kernel"));
    CHECK(HcommThreadNotifyWaitOnThread(ctx->aicpu, 0, 10000));
    CHECK(HcommLocalCopyOnThread(ctx->aicpu, dst, src, sizeof host));
    CHECK(HcommThreadNotifyRecordOnThread(ctx->aicpu, ctx->cpuOnAicpu, 0));
    CHECK(HcommThreadNotifyWaitOnThread(ctx->cpu, 0, 10000));
    CHECK(HcommBatchModeEnd("kernel"));
    CHECK(aclrtSynchronizeStream(stream));

    memset(host, 0, sizeof host);
    CHECK(aclrtMemcpy(host, sizeof host, dst, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
    for (i = 0; i < N; i++) {
        if (host[i] != (float)i * 0.5f) {
            fprintf(stderr, "element %d is %g, expected %g\n", i, host[i], (float)i * 0.5f);
            return 1;
        }
    }
    CHECK(HcclEngineCtxDestroy(comm, "custom_p2p", COMM_ENGINE_CPU_TS));
    CHECK(aclrtFree(src));
    CHECK(aclrtFree(dst));
    CHECK(HcclCommDestroy(comm));
    CHECK(aclrtDestroyStream(stream));
    printf("custom op OK\n");
    return 0;
}
