/* What the host library hands its AICPU kernel: the resources (kept in an engine context) and the call. */
#ifndef HCCL_CUSTOM_DEMO_TYPES_H
#define HCCL_CUSTOM_DEMO_TYPES_H

#include <stdint.h>
#include <hccl/hccl_res.h>
#include <hccl/hcomm_primitives.h>

#define DEMO_MAX_RANKS 64
#define DEMO_NOTIFY_READY 0      /* channel notify: my input is in my HCCL buffer */
#define DEMO_NOTIFY_DONE 1       /* channel notify: I have read your HCCL buffer */
#define DEMO_TIMEOUT_S 30
#define DEMO_TAG "hccl_demo_allgather"

struct DemoResources {
    ThreadHandle hostThread;               /* the user stream's thread (CPU_TS), 1 notify */
    ThreadHandle aicpuThread;              /* the kernel's thread (AICPU_TS), 1 notify */
    void* buffer;                          /* my HCCL buffer */
    uint64_t bufferSize;
    uint32_t rank;
    uint32_t nRanks;
    ChannelHandle channels[DEMO_MAX_RANKS];    /* by peer rank (mine unused) */
    void* peerBuffers[DEMO_MAX_RANKS];         /* each peer's HCCL buffer, seen through its channel */
};

struct DemoArgs {
    char commName[128];
    const void* send;
    void* recv;
    uint64_t bytes;
    DemoResources* res;                    /* device copy (engine context) */
};

/* send/recv: one channel to the peer, the sender's input staged in its HCCL buffer, the receiver reads it */
struct DemoP2PResources {
    ThreadHandle hostThread;
    ThreadHandle aicpuThread;
    ChannelHandle channel;
    void* buffer;
    uint64_t bufferSize;
    void* peerBuffer;
};

struct DemoP2PArgs {
    char commName[128];
    void* data;                            /* the send buffer, or the receive buffer */
    uint64_t bytes;
    uint32_t isSend;
    DemoP2PResources* res;
};

#endif
