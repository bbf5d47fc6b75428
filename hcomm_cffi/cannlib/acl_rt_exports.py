"""Every host function of the vendor's ``acl/acl_rt.h``: the emulated libacl_rt.so exports each one.

One rule decides what an export does (:func:`export_kind`): a function the package's cdef declares is
forwarded to the emulator like every other declared function (implemented when ``SimLibrary`` has a
method of that name, else the emulator's "not implemented" answer); any other name is an exported
stub that names itself in ``aclGetRecentErrMsg()`` and returns the vendor's "API not supported" code
``ACL_ERROR_API_NOT_SUPPORT`` (hicann/runtime@681ef7610df1:src/acl/aclrt_impl/device.cpp:82, returned where a
product lacks an API), NULL for a pointer or ``UINT32_MAX`` for an integer.  So a branch that implements
more (a cdef declaration plus a SimLibrary method) never edits this list.

The names are the ``ACL_FUNC_VISIBILITY`` declarations of hicann/runtime@681ef7610df1:
include/external/acl/acl_rt.h (373 functions; ABI facts: names and return types only).
"""
from __future__ import annotations

from typing import Dict, Tuple

__all__ = ["ACL_RT_FUNCTIONS", "NON_ACLERROR_RETURNS", "ACL_ERROR_API_NOT_SUPPORT", "stub_return",
           "ACL_RT_MACROS", "ACL_PROF_MACROS"]

ACL_ERROR_API_NOT_SUPPORT = 200001

#: the functions of acl/acl_rt.h returning aclError, in header order
_ACLERROR_FUNCTIONS: Tuple[str, ...] = (
    "aclInit", "aclFinalize", "aclFinalizeReference", "aclsysGetCANNVersion", "aclsysGetVersionStr",
    "aclsysGetVersionNum", "aclrtPeekAtLastError", "aclrtGetLastError", "aclrtSetExceptionInfoCallback",
    "aclrtExceptionInfoCallbackRegister", "aclrtExceptionInfoCallbackUnregister", "aclrtGetArgsFromExceptionInfo",
    "aclrtGetFuncHandleFromExceptionInfo", "aclrtBinarySetExceptionCallback", "aclrtSubscribeReport",
    "aclrtLaunchCallback", "aclrtProcessReport", "aclrtUnSubscribeReport", "aclrtCreateContext",
    "aclrtDestroyContext", "aclrtSetCurrentContext", "aclrtGetCurrentContext", "aclrtCtxGetSysParamOpt",
    "aclrtCtxSetSysParamOpt", "aclrtGetSysParamOpt", "aclrtSetSysParamOpt", "aclrtSetDevice", "aclrtResetDevice",
    "aclrtResetDeviceForce", "aclrtGetDevice", "aclrtSetStreamFailureMode", "aclrtGetRunMode",
    "aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout", "aclrtSetTsDevice",
    "aclrtGetDeviceUtilizationRate", "aclrtGetDeviceCount", "aclrtCreateEvent", "aclrtCreateEventWithFlag",
    "aclrtCreateEventExWithFlag", "aclrtDestroyEvent", "aclrtRecordEvent", "aclrtRecordEventWithFlag",
    "aclrtResetEvent", "aclrtQueryEvent", "aclrtQueryEventStatus", "aclrtQueryEventWaitStatus",
    "aclrtSynchronizeEvent", "aclrtSynchronizeEventWithTimeout", "aclrtEventElapsedTime", "aclrtEventGetTimestamp",
    "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMallocWithCfg", "aclrtMallocForTaskScheduler",
    "aclrtMallocHostWithCfg", "aclrtPointerGetAttributes", "aclrtMemManagedGetAttr", "aclrtMemManagedGetAttrs",
    "aclrtHostRegister", "aclrtHostRegisterV2", "aclrtHostGetDevicePointer", "aclrtHostUnregister",
    "aclrtHostMemMapCapabilities", "aclrtGetThreadLastTaskId", "aclrtStreamGetId", "aclrtMemFlush",
    "aclrtMemInvalidate", "aclrtFree", "aclrtMallocHost", "aclrtMemAllocManaged", "aclrtFreeHost",
    "aclrtFreeWithDevSync", "aclrtFreeHostWithDevSync", "aclrtMemcpy", "aclrtMemset", "aclrtMemcpyAsync",
    "aclrtMemsetD32", "aclrtMemsetD32Async", "aclrtMemcpyAsyncWithCondition", "aclrtMemcpy2d", "aclrtMemcpy2dAsync",
    "aclrtGetSymbolAddress", "aclrtGetSymbolSize", "aclrtMemcpyFromSymbol", "aclrtMemcpyFromSymbolAsync",
    "aclrtMemcpyToSymbol", "aclrtMemcpyToSymbolAsync", "aclrtMemsetAsync", "aclrtMemManagedAdvise",
    "aclrtReserveMemAddress", "aclrtReleaseMemAddress", "aclrtMallocPhysical", "aclrtFreePhysical", "aclrtMapMem",
    "aclrtUnmapMem", "aclrtMemMapNoAccess", "aclrtDestroyStreamConfigHandle", "aclrtSetStreamConfigOpt",
    "aclrtCreateStream", "aclrtCreateStreamV2", "aclrtCreateStreamWithConfig", "aclrtDestroyStream",
    "aclrtDestroyStreamForce", "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout", "aclrtStreamQuery",
    "aclrtStreamGetPriority", "aclrtStreamGetFlags", "aclrtStreamWaitEvent", "aclrtStreamWaitEventWithFlag",
    "aclrtStreamWaitEventWithTimeout", "aclrtSetGroup", "aclrtGetGroupCount", "aclrtDestroyGroupInfo",
    "aclrtGetAllGroupInfo", "aclrtGetGroupInfoDetail", "aclrtDeviceCanAccessPeer", "aclrtDeviceEnablePeerAccess",
    "aclrtDeviceDisablePeerAccess", "aclrtGetMemInfo", "aclrtGetMemUsageInfo", "aclrtSetOpWaitTimeout",
    "aclrtSetOpExecuteTimeOut", "aclrtSetOpExecuteTimeOutWithMs", "aclrtSetOpExecuteTimeOutV2",
    "aclrtGetOpTimeOutInterval", "aclrtSetStreamOverflowSwitch", "aclrtGetStreamOverflowSwitch",
    "aclrtSetDeviceSatMode", "aclrtGetDeviceSatMode", "aclrtGetOverflowStatus", "aclrtResetOverflowStatus",
    "aclrtSubscribeHostFunc", "aclrtProcessHostFunc", "aclrtUnSubscribeHostFunc", "aclrtQueryDeviceStatus",
    "aclrtDestroyBinary", "aclrtBinaryLoad", "aclrtBinaryUnLoad", "aclrtBinaryGetFunction", "aclrtLaunchKernel",
    "aclrtMemExportToShareableHandle", "aclrtMemExportToShareableHandleV2", "aclrtMemImportFromShareableHandle",
    "aclrtMemImportFromShareableHandleV2", "aclrtMemSetPidToShareableHandle", "aclrtMemSetPidToShareableHandleV2",
    "aclrtMemGetAllocationGranularity", "aclrtDeviceGetBareTgid", "aclrtCmoAsync", "aclrtGetMemUceInfo",
    "aclrtDeviceTaskAbort", "aclrtMemUceRepair", "aclrtStreamAbort", "aclrtBinaryLoadFromFile",
    "aclrtBinaryGetDevAddress", "aclrtBinaryGetFunctionByEntry", "aclrtBinaryGetGlobal", "aclrtGetFuncBySymbol",
    "aclrtGetFunctionAddr", "aclrtGetFunctionSize", "aclrtGetMemcpyDescSize", "aclrtSetMemcpyDesc",
    "aclrtMemcpyAsyncWithOffset", "aclrtMemcpyAsyncWithDesc", "aclrtKernelArgsGetHandleMemSize",
    "aclrtKernelArgsGetMemSize", "aclrtKernelArgsInit", "aclrtKernelArgsInitByUserMem", "aclrtKernelArgsAppend",
    "aclrtKernelArgsAppendPlaceHolder", "aclrtKernelArgsGetPlaceHolderBuffer", "aclrtKernelArgsParaUpdate",
    "aclrtLaunchKernelWithConfig", "aclmdlRITaskGetParams", "aclmdlRITaskSetParams",
    "aclmdlRIKernelTaskGetAttribute", "aclmdlRIUpdate", "aclmdlRITaskDisable", "aclrtKernelArgsFinalize",
    "aclrtValueWrite", "aclrtValueWait", "aclrtGetStreamAvailableNum", "aclrtSetStreamAttribute",
    "aclrtGetStreamAttribute", "aclrtCreateNotify", "aclrtDestroyNotify", "aclrtCntNotifyCreate",
    "aclrtCntNotifyDestroy", "aclrtRecordNotify", "aclrtWaitAndResetNotify", "aclrtGetNotifyId", "aclrtGetEventId",
    "aclrtGetEventAvailNum", "aclrtGetDeviceInfo", "aclrtDeviceGetStreamPriorityRange", "aclrtGetDeviceCapability",
    "aclrtDeviceGetUuid", "aclrtDeviceSetLimit", "aclrtDeviceGetLimit", "aclrtDeviceGetPCIBusId",
    "aclrtDeviceGetByPCIBusId", "aclrtDeviceGetHostAtomicCapabilities", "aclrtDeviceGetP2PAtomicCapabilities",
    "aclrtCtxGetCurrentDefaultStream", "aclrtGetPrimaryCtxState", "aclrtReduceAsync", "aclrtGetDeviceResLimit",
    "aclrtSetDeviceResLimit", "aclrtResetDeviceResLimit", "aclrtGetStreamResLimit", "aclrtSetStreamResLimit",
    "aclrtResetStreamResLimit", "aclrtUseStreamResInCurrentThread", "aclrtUnuseStreamResInCurrentThread",
    "aclrtGetResInCurrentThread", "aclrtCreateLabel", "aclrtSetLabel", "aclrtDestroyLabel", "aclrtCreateLabelList",
    "aclrtDestroyLabelList", "aclrtSwitchLabelByIndex", "aclrtActiveStream", "aclrtSwitchStream",
    "aclrtGetFunctionName", "aclrtGetBufFromChain", "aclrtGetBufChainNum", "aclrtAppendBufChain", "aclrtCopyBufRef",
    "aclrtGetBufUserData", "aclrtSetBufUserData", "aclrtGetBufData", "aclrtGetBufDataLen", "aclrtSetBufDataLen",
    "aclrtFreeBuf", "aclrtAllocBuf", "aclrtBinaryLoadFromData", "aclrtRegisterCpuFunc", "aclrtCmoAsyncWithBarrier",
    "aclrtCmoWaitBarrier", "aclrtGetDevicesTopo", "aclrtMemcpyBatch", "aclrtMemcpyBatchV2", "aclrtMemcpyBatchAsync",
    "aclrtMemcpyBatchAsyncV2", "aclrtIpcMemGetExportKey", "aclrtIpcMemClose", "aclrtIpcMemImportByKey",
    "aclrtIpcMemSetImportPid", "aclrtIpcMemSetAttr", "aclrtIpcMemImportPidInterServer", "aclrtNotifyBatchReset",
    "aclrtNotifyGetExportKey", "aclrtNotifyImportByKey", "aclrtNotifySetImportPid",
    "aclrtNotifySetImportPidInterServer", "aclmdlRICaptureBegin", "aclmdlRICaptureGetInfo", "aclmdlRICaptureEnd",
    "aclmdlRIDebugPrint", "aclmdlRIDebugJsonPrint", "aclmdlRICaptureThreadExchangeMode", "aclmdlRIExecuteAsync",
    "aclmdlRIExecute", "aclmdlRIDestroy", "aclmdlRICaptureTaskGrpBegin", "aclmdlRICaptureTaskGrpEnd",
    "aclmdlRICaptureTaskUpdateBegin", "aclmdlRICaptureTaskUpdateEnd", "aclmdlRIBuildBegin", "aclmdlRIBindStream",
    "aclmdlRIEndTask", "aclmdlRIBuildEnd", "aclmdlRIUnbindStream", "aclmdlRISetName", "aclmdlRIGetName",
    "aclmdlRIGetId", "aclmdlRIDestroyRegisterCallback", "aclmdlRIDestroyUnregisterCallback", "aclmdlInitDump",
    "aclmdlSetDump", "aclmdlFinalizeDump", "aclmdlRIGetStreams", "aclmdlRIGetTasksByStream", "aclmdlRITaskGetType",
    "aclmdlRITaskGetSeqId", "aclrtGetVersion", "aclInitCallbackRegister", "aclInitCallbackUnRegister",
    "aclFinalizeCallbackRegister", "aclFinalizeCallbackUnRegister", "aclrtCheckMemType",
    "aclrtGetLogicDevIdByUserDevId", "aclrtGetUserDevIdByLogicDevId", "aclrtGetLogicDevIdByPhyDevId",
    "aclrtGetPhyDevIdByLogicDevId", "aclrtGetUserDevIdByPhyDevId", "aclrtGetPhyDevIdByUserDevId", "aclrtProfTrace",
    "aclrtLaunchKernelV2", "aclrtLaunchKernelWithHostArgs", "aclrtLaunchKernelWithArgsArray",
    "aclrtLaunchSIMTKernelWithArgsArray", "aclrtLaunchSIMTKernelWithHostArgs", "aclrtCtxGetFloatOverflowAddr",
    "aclrtGetFloatOverflowStatus", "aclrtResetFloatOverflowStatus", "aclrtNpuGetFloatOverFlowStatus",
    "aclrtNpuClearFloatOverFlowStatus", "aclrtLaunchHostFunc", "aclrtGetHardwareSyncAddr", "aclrtRandomNumAsync",
    "aclrtRegStreamStateCallback", "aclrtRegDeviceStateCallback", "aclrtSetDeviceTaskAbortCallback",
    "aclrtGetOpExecuteTimeout", "aclrtDevicePeerAccessStatus", "aclrtStreamStop", "aclrtTaskUpdateAsync",
    "aclrtCmoGetDescSize", "aclrtCmoSetDesc", "aclrtCmoAsyncWithDesc", "aclrtCheckArchCompatibility",
    "aclmdlRIAbort", "aclmdlRICondHandleCreate", "aclmdlRICondHandleGetCondPtr", "aclmdlRIAddCondTask",
    "aclmdlRICaptureToModelRIBegin", "aclrtCntNotifyRecord", "aclrtCntNotifyWaitWithTimeout", "aclrtCntNotifyReset",
    "aclrtCntNotifyGetId", "aclrtPersistentTaskClean", "aclrtGetErrorVerbose", "aclrtRepairError",
    "aclrtMemSetAccess", "aclrtMemGetAccess", "aclrtSnapShotProcessLock", "aclrtSnapShotProcessUnlock",
    "aclrtSnapShotProcessBackup", "aclrtSnapShotProcessRestore", "aclrtSnapShotCallbackRegister",
    "aclrtSnapShotCallbackUnregister", "aclrtCacheLastTaskOpInfo", "aclrtCacheLastTaskExtendInfo",
    "aclrtGetFunctionAttribute", "aclrtFunctionGetBinary", "aclrtFunctionGetParamCount",
    "aclrtFunctionGetParamInfo", "aclrtFunctionGetAvailDynUbufPerBlock", "aclrtIpcGetEventHandle",
    "aclrtIpcOpenEventHandle", "aclrtMemRetainAllocationHandle", "aclrtMemGetAllocationPropertiesFromHandle",
    "aclrtReserveMemAddressNoUCMemory", "aclrtMemGetAddressRange", "aclrtMemP2PMap", "aclrtMemManagedPrefetchAsync",
    "aclrtMemManagedPrefetchBatchAsync", "aclrtMemMapSelectedLink", "aclrtDeviceL2CacheFlush", "aclrtMemMapSetLink",
)

#: the others: name -> C return type
NON_ACLERROR_RETURNS: Dict[str, str] = {
    "aclGetRecentErrMsg": "const char*",
    "aclrtGetTaskIdFromExceptionInfo": "uint32_t", "aclrtGetStreamIdFromExceptionInfo": "uint32_t",
    "aclrtGetThreadIdFromExceptionInfo": "uint32_t", "aclrtGetDeviceIdFromExceptionInfo": "uint32_t",
    "aclrtGetErrorCodeFromExceptionInfo": "uint32_t",
    "aclrtCreateStreamConfigHandle": "void*", "aclrtCreateGroupInfo": "void*", "aclrtCreateBinary": "void*",
}

#: every host function of acl/acl_rt.h
ACL_RT_FUNCTIONS: Tuple[str, ...] = _ACLERROR_FUNCTIONS + tuple(NON_ACLERROR_RETURNS)


def stub_return(name: str) -> Tuple[str, str]:
    """(C return type, value) of the exported stub of ``name``: the not-supported code, NULL or UINT32_MAX."""
    ret = NON_ACLERROR_RETURNS.get(name, "aclError")
    if ret == "aclError":
        return "int32_t", str(ACL_ERROR_API_NOT_SUPPORT)
    if ret.endswith("*"):
        return "void*", "NULL"
    return "uint32_t", "0xFFFFFFFFU"


#: acl/acl_rt.h macros C clients use (hicann/runtime@681ef7610df1:include/external/acl/acl_rt.h:28-33)
ACL_RT_MACROS: Tuple[Tuple[str, str], ...] = (
    ("ACL_EVENT_SYNC", "0x00000001U"), ("ACL_EVENT_CAPTURE_STREAM_PROGRESS", "0x00000002U"),
    ("ACL_EVENT_TIME_LINE", "0x00000008U"), ("ACL_EVENT_DEVICE_USE_ONLY", "0x00000010U"),
    ("ACL_EVENT_EXTERNAL", "0x00000020U"), ("ACL_EVENT_IPC", "0x00000040U"),
)
#: acl/acl_prof.h's data-type switches (same commit, include/external/acl/acl_prof.h:26-43)
ACL_PROF_MACROS: Tuple[Tuple[str, str], ...] = (
    ("ACL_PROF_ACL_API", "0x0001ULL"), ("ACL_PROF_TASK_TIME", "0x0002ULL"), ("ACL_PROF_AICORE_METRICS", "0x0004ULL"),
    ("ACL_PROF_AICPU", "0x0008ULL"), ("ACL_PROF_L2CACHE", "0x0010ULL"), ("ACL_PROF_HCCL_TRACE", "0x0020ULL"),
    ("ACL_PROF_TRAINING_TRACE", "0x0040ULL"), ("ACL_PROF_MSPROFTX", "0x0080ULL"),
    ("ACL_PROF_RUNTIME_API", "0x0100ULL"), ("ACL_PROF_GE_API_L0", "0x0200ULL"), ("ACL_PROF_TASK_TIME_L0", "0x0800ULL"),
    ("ACL_PROF_TASK_MEMORY", "0x1000ULL"), ("ACL_PROF_GE_API_L1", "0x01000000ULL"),
    ("ACL_PROF_TASK_TIME_L2", "0x2000ULL"), ("ACL_PROF_OP_ATTR", "0x4000ULL"), ("ACL_PROF_TASK_TIME_L3", "0x8000ULL"),
    ("ACL_PROF_API_STATS", "0x400000000ULL"), ("ACL_PROF_AICORE_SHAPE", "0x800000000ULL"),
)
