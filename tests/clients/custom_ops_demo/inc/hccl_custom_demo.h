/* hcomm_cffi's own custom communication operator package (tests/test_custom_ops.py), in the layout of a
 * vendor operator package: op_host/ (the host library libhccl_custom_demo.so), op_kernel_aicpu/ (the AICPU
 * kernel and its JSON), inc/ (this public header), testcase/ (a program and its Makefile). */
#ifndef HCCL_CUSTOM_DEMO_H
#define HCCL_CUSTOM_DEMO_H

#include <acl/acl.h>
#include <hccl/hccl_comm.h>
#include <hccl/hccl_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank's `bytes` bytes of sendBuf, in rank order, in recvBuf (nRanks * bytes). */
HcclResult HcclDemoAllGather(const void* sendBuf, void* recvBuf, uint64_t bytes, HcclComm comm, aclrtStream stream);

/* `bytes` bytes of sendBuf into the matching HcclDemoRecv's recvBuf on rank destRank (they must pair up). */
HcclResult HcclDemoSend(const void* sendBuf, uint64_t bytes, uint32_t destRank, HcclComm comm, aclrtStream stream);
HcclResult HcclDemoRecv(void* recvBuf, uint64_t bytes, uint32_t srcRank, HcclComm comm, aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif
