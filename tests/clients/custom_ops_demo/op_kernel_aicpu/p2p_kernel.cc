/* The AICPU kernel of HcclDemoSend / HcclDemoRecv, one thread and one channel.  Sender: stage the data in
 * my HCCL buffer, "ready" to the receiver, wait for its "done".  Receiver: wait for "ready", read the
 * sender's buffer into mine, "done".  Both: wait for the host's go first, tell the host stream at the end. */
#include <hccl/hcomm_primitives.h>
#include "demo_types.h"

#define CHECK(call) do { if ((call) != 0) return 1; } while (0)

extern "C" unsigned int HcclDemoP2PKernel(DemoP2PArgs* args)
{
    DemoP2PResources* r = args->res;
    ThreadHandle th = r->aicpuThread;
    CHECK(HcommAcquireComm(args->commName));
    CHECK(HcommBatchModeStart(DEMO_TAG));
    CHECK(HcommThreadNotifyWaitOnThread(th, 0, DEMO_TIMEOUT_S));
    if (args->isSend) {
        CHECK(HcommLocalCopyOnThread(th, r->buffer, args->data, args->bytes));
        CHECK(HcommChannelNotifyRecordOnThread(th, r->channel, DEMO_NOTIFY_READY));
        CHECK(HcommChannelNotifyWaitOnThread(th, r->channel, DEMO_NOTIFY_DONE, DEMO_TIMEOUT_S));
    } else {
        CHECK(HcommChannelNotifyWaitOnThread(th, r->channel, DEMO_NOTIFY_READY, DEMO_TIMEOUT_S));
        CHECK(HcommReadOnThread(th, r->channel, args->data, r->peerBuffer, args->bytes));
        CHECK(HcommChannelNotifyRecordOnThread(th, r->channel, DEMO_NOTIFY_DONE));
    }
    CHECK(HcommThreadNotifyRecordOnThread(th, r->hostThread, 0));
    CHECK(HcommBatchModeEnd(DEMO_TAG));
    CHECK(HcommReleaseComm(args->commName));
    return 0;
}
