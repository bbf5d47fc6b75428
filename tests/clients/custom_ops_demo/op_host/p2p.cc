/* The host side of HcclDemoSend / HcclDemoRecv: per peer, a kernel thread and one channel (kept in an engine
 * context named after the peer), then one AICPU kernel launch per call. */
#include <stdio.h>
#include <string.h>
#include <hccl/hccl_res_expt.h>
#include "demo_types.h"
#include "hccl_custom_demo.h"
#include "launch.h"

static HcclResult AcquireP2P(HcclComm comm, aclrtStream stream, uint32_t peer, DemoP2PResources* host,
                             DemoP2PResources** device)
{
    char tag[64];
    snprintf(tag, sizeof tag, "hccl_demo_p2p_%u", peer);
    void* ctx = nullptr;
    uint64_t size = sizeof(DemoP2PResources);
    if (HcclEngineCtxGet(comm, tag, COMM_ENGINE_AICPU_TS, &ctx, &size) != HCCL_SUCCESS) {
        DemoP2PResources r;
        memset(&r, 0, sizeof r);
        CHK(HcclThreadAcquireWithStream(comm, COMM_ENGINE_CPU_TS, stream, 1, &r.hostThread));
        CHK(HcclThreadAcquire(comm, COMM_ENGINE_AICPU_TS, 1, 1, &r.aicpuThread));
        HcclChannelDesc desc;
        CHK(HcclChannelDescInit(&desc, 1));
        desc.remoteRank = peer;
        desc.channelProtocol = COMM_PROTOCOL_HCCS;
        desc.notifyNum = 2;
        CHK(HcclChannelAcquire(comm, COMM_ENGINE_AICPU_TS, &desc, 1, &r.channel));
        uint64_t peerSize = 0;
        CHK(HcclChannelGetHcclBuffer(comm, r.channel, &r.peerBuffer, &peerSize));
        CHK(HcclGetHcclBuffer(comm, &r.buffer, &r.bufferSize));
        CHK(HcclEngineCtxCreate(comm, tag, COMM_ENGINE_AICPU_TS, sizeof r, &ctx));
        CHK(HcclEngineCtxCopy(comm, COMM_ENGINE_AICPU_TS, tag, &r, sizeof r, 0));
    }
    *device = static_cast<DemoP2PResources*>(ctx);
    ACL_CHK(aclrtMemcpy(host, sizeof *host, ctx, sizeof *host, ACL_MEMCPY_DEVICE_TO_HOST));
    return HCCL_SUCCESS;
}

static HcclResult P2P(void* data, uint64_t bytes, uint32_t peer, uint32_t isSend, HcclComm comm, aclrtStream stream)
{
    if (data == nullptr || comm == nullptr || stream == nullptr) return HCCL_E_PTR;
    DemoP2PResources host;
    DemoP2PArgs args;
    memset(&args, 0, sizeof args);
    CHK(AcquireP2P(comm, stream, peer, &host, &args.res));
    if (bytes > host.bufferSize) return HCCL_E_PARA;        /* one step: the data fits the sender's HCCL buffer */
    CHK(HcclGetCommName(comm, args.commName));
    args.data = data;
    args.bytes = bytes;
    args.isSend = isSend;
    return DemoLaunch("HcclDemoP2PKernel", &args, sizeof args, host.hostThread, host.aicpuThread, stream);
}

HcclResult HcclDemoSend(const void* sendBuf, uint64_t bytes, uint32_t destRank, HcclComm comm, aclrtStream stream)
{
    return P2P(const_cast<void*>(sendBuf), bytes, destRank, 1, comm, stream);
}

HcclResult HcclDemoRecv(void* recvBuf, uint64_t bytes, uint32_t srcRank, HcclComm comm, aclrtStream stream)
{
    return P2P(recvBuf, bytes, srcRank, 0, comm, stream);
}
