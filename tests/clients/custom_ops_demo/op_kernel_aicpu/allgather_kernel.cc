/* The AICPU kernel of HcclDemoAllGather: a mesh allgather that reads every peer's HCCL buffer.
 * All tasks go on the kernel's one thread, in one batch: wait for the host's go, put my input into my
 * HCCL buffer, tell every peer it is ready, read each peer's once it says so, tell it I am done, wait until
 * every peer is done with mine, then tell the host stream. */
#include <hccl/hcomm_primitives.h>
#include "demo_types.h"

#define CHECK(call) do { if ((call) != 0) return 1; } while (0)

extern "C" unsigned int HcclDemoAllGatherKernel(DemoArgs* args)
{
    DemoResources* r = args->res;
    ThreadHandle th = r->aicpuThread;
    char* recv = static_cast<char*>(args->recv);
    CHECK(HcommAcquireComm(args->commName));
    CHECK(HcommBatchModeStart(DEMO_TAG));
    CHECK(HcommThreadNotifyWaitOnThread(th, 0, DEMO_TIMEOUT_S));
    CHECK(HcommLocalCopyOnThread(th, r->buffer, args->send, args->bytes));
    CHECK(HcommLocalCopyOnThread(th, recv + r->rank * args->bytes, r->buffer, args->bytes));
    for (uint32_t peer = 0; peer < r->nRanks; peer++) {
        if (peer != r->rank) CHECK(HcommChannelNotifyRecordOnThread(th, r->channels[peer], DEMO_NOTIFY_READY));
    }
    for (uint32_t peer = 0; peer < r->nRanks; peer++) {
        if (peer == r->rank) continue;
        CHECK(HcommChannelNotifyWaitOnThread(th, r->channels[peer], DEMO_NOTIFY_READY, DEMO_TIMEOUT_S));
        CHECK(HcommReadOnThread(th, r->channels[peer], recv + peer * args->bytes, r->peerBuffers[peer], args->bytes));
        CHECK(HcommChannelNotifyRecordOnThread(th, r->channels[peer], DEMO_NOTIFY_DONE));
    }
    for (uint32_t peer = 0; peer < r->nRanks; peer++) {
        if (peer != r->rank) CHECK(HcommChannelNotifyWaitOnThread(th, r->channels[peer], DEMO_NOTIFY_DONE, DEMO_TIMEOUT_S));
    }
    CHECK(HcommThreadNotifyRecordOnThread(th, r->hostThread, 0));   /* the host stream's go-on */
    CHECK(HcommBatchModeEnd(DEMO_TAG));
    CHECK(HcommReleaseComm(args->commName));
    return 0;
}
