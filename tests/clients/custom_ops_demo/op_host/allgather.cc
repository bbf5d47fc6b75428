/* The host side of HcclDemoAllGather: resources once per communicator (kept in an engine context), then one
 * AICPU kernel launch per call. */
#include <string.h>
#include <hccl/hccl_res_expt.h>
#include "demo_types.h"
#include "hccl_custom_demo.h"
#include "launch.h"

static HcclResult AcquireResources(HcclComm comm, aclrtStream stream, DemoResources** device)
{
    void* ctx = nullptr;
    uint64_t size = sizeof(DemoResources);
    if (HcclEngineCtxGet(comm, DEMO_TAG, COMM_ENGINE_AICPU_TS, &ctx, &size) == HCCL_SUCCESS) {
        *device = static_cast<DemoResources*>(ctx);
        return HCCL_SUCCESS;
    }
    DemoResources r;
    memset(&r, 0, sizeof r);
    CHK(HcclGetRankId(comm, &r.rank));
    CHK(HcclGetRankSize(comm, &r.nRanks));
    if (r.nRanks > DEMO_MAX_RANKS) return HCCL_E_PARA;
    CHK(HcclThreadAcquireWithStream(comm, COMM_ENGINE_CPU_TS, stream, 1, &r.hostThread));
    CHK(HcclThreadAcquire(comm, COMM_ENGINE_AICPU_TS, 1, 1, &r.aicpuThread));
    HcclChannelDesc descs[DEMO_MAX_RANKS];
    ChannelHandle channels[DEMO_MAX_RANKS];
    uint32_t n = 0;
    for (uint32_t peer = 0; peer < r.nRanks; peer++) {
        if (peer == r.rank) continue;
        CHK(HcclChannelDescInit(&descs[n], 1));
        descs[n].remoteRank = peer;
        descs[n].channelProtocol = COMM_PROTOCOL_HCCS;
        descs[n].notifyNum = 2;
        n++;
    }
    if (n > 0) CHK(HcclChannelAcquire(comm, COMM_ENGINE_AICPU_TS, descs, n, channels));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t peer = descs[i].remoteRank;
        uint64_t peerSize = 0;
        r.channels[peer] = channels[i];
        CHK(HcclChannelGetHcclBuffer(comm, channels[i], &r.peerBuffers[peer], &peerSize));
    }
    CHK(HcclGetHcclBuffer(comm, &r.buffer, &r.bufferSize));
    CHK(HcclEngineCtxCreate(comm, DEMO_TAG, COMM_ENGINE_AICPU_TS, sizeof r, &ctx));
    CHK(HcclEngineCtxCopy(comm, COMM_ENGINE_AICPU_TS, DEMO_TAG, &r, sizeof r, 0));
    *device = static_cast<DemoResources*>(ctx);
    return HCCL_SUCCESS;
}

HcclResult HcclDemoAllGather(const void* sendBuf, void* recvBuf, uint64_t bytes, HcclComm comm, aclrtStream stream)
{
    if (sendBuf == nullptr || recvBuf == nullptr || comm == nullptr || stream == nullptr) return HCCL_E_PTR;
    DemoResources* res = nullptr;
    CHK(AcquireResources(comm, stream, &res));
    DemoResources host;
    ACL_CHK(aclrtMemcpy(&host, sizeof host, res, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST));
    if (bytes > host.bufferSize) return HCCL_E_PARA;        /* one step: my input fits my HCCL buffer */
    DemoArgs args;
    memset(&args, 0, sizeof args);
    CHK(HcclGetCommName(comm, args.commName));
    args.send = sendBuf;
    args.recv = recvBuf;
    args.bytes = bytes;
    args.res = res;
    return DemoLaunch("HcclDemoAllGatherKernel", &args, sizeof args, host.hostThread, host.aicpuThread, stream);
}
