"""The C declarations of the CANN HCCL / HCOMM / ACL host ABI, as text (plain data; only ``re`` is imported).

``build_ffi.py`` loads this file by path at build time (so the build needs no import of the
package) and compiles ``CDEF`` with cffi; at run time the emulator's ABI check
(``sim/abi_check.py``) reads the declared function types from the same text, so an installed
package needs no source checkout.  The vendor headers are C++-only, hence the literal array bounds;
every layout here is checked against compiler-derived golden values by the tests.
"""

import re

__all__ = ["CDEF", "FUNCTIONS_MARKER", "DECLARATION"]

#: Where the function declarations start in CDEF.
FUNCTIONS_MARKER = "/* ---- functions"
#: One function declaration on a line of CDEF's function section: (return type, name, parameters).
DECLARATION = re.compile(r"^\s*([A-Za-z_][\w \*]*?[\s\*])([A-Za-z_]\w*)\s*\(([^;]*)\)\s*;\s*$", re.M)

# Fields shared by both generations of HcclCommConfig (2026-08 appends hcclChannelSqDepth).
_COMM_CONFIG_FIELDS = """\
    char reserved[24];
    uint32_t hcclBufferSize;
    uint32_t hcclDeterministic;
    char hcclCommName[128];
    char hcclUdi[128];
    uint32_t hcclOpExpansionMode;
    uint32_t hcclRdmaTrafficClass;
    uint32_t hcclRdmaServiceLevel;
    uint32_t hcclWorldRankID;
    uint64_t hcclJobID;
    uint8_t aclGraphZeroCopyEnable;
    int32_t hcclExecTimeOut;
    char hcclAlgo[1600];
    char hcclRetryEnable[50];
    char hcclRetryParams[128];
    char hcclBufferName[128];
    uint32_t hcclQos;
    uint64_t hcclSymWinMaxMemSizePerRank;
"""

CDEF = r"""
/* ---- scalar and handle typedefs (hccl_types.h, hcomm_res_defs.h, acl_base_rt.h) ---- */
typedef void *HcclComm;
typedef void *HcclConn;
typedef void *HcclCommSymWindow;
typedef uint64_t ThreadHandle;
typedef uint64_t ChannelHandle;
typedef void *HcclMemHandle;
typedef void *HcommMemHandle;
typedef void *EndpointHandle;
typedef void *HcommSocket;
typedef int32_t HcommResult;
typedef void *HcclChannelConfig;
typedef void *HcommChannelConfig;
typedef uint64_t *HcommTeamHandle;
typedef uint64_t *HcommWindowHandle;
typedef uint32_t EndpointAttrBwCoeff;
typedef uint32_t EndpointAttrDieId;
typedef uint32_t EndpointAttrLocation;
typedef uint64_t CcuInsHandle;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void *aclrtDrvMemHandle;
typedef int aclError;
typedef uint32_t in_addr_t;

/* ---- enums: every member with the value the compiler gave it ---- */
typedef enum {
    HCCL_SUCCESS = 0, HCCL_E_PARA = 1, HCCL_E_PTR = 2, HCCL_E_MEMORY = 3, HCCL_E_INTERNAL = 4,
    HCCL_E_NOT_SUPPORT = 5, HCCL_E_NOT_FOUND = 6, HCCL_E_UNAVAIL = 7, HCCL_E_SYSCALL = 8,
    HCCL_E_TIMEOUT = 9, HCCL_E_OPEN_FILE_FAILURE = 10, HCCL_E_TCP_CONNECT = 11, HCCL_E_ROCE_CONNECT
    = 12, HCCL_E_TCP_TRANSFER = 13, HCCL_E_ROCE_TRANSFER = 14, HCCL_E_RUNTIME = 15, HCCL_E_DRV = 16,
    HCCL_E_PROFILING = 17, HCCL_E_CCE = 18, HCCL_E_NETWORK = 19, HCCL_E_AGAIN = 20, HCCL_E_REMOTE =
    21, HCCL_E_SUSPENDING = 22, HCCL_E_OPRETRY_FAIL = 23, HCCL_E_OOM = 24, HCCL_E_IN_STATUS = 1041,
    HCCL_E_RESERVED = 1042
} HcclResult;
typedef enum {
    HCCL_REDUCE_SUM = 0, HCCL_REDUCE_PROD = 1, HCCL_REDUCE_MAX = 2, HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;
typedef enum {
    HCCL_DATA_TYPE_INT8 = 0, HCCL_DATA_TYPE_INT16 = 1, HCCL_DATA_TYPE_INT32 = 2, HCCL_DATA_TYPE_FP16
    = 3, HCCL_DATA_TYPE_FP32 = 4, HCCL_DATA_TYPE_INT64 = 5, HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7, HCCL_DATA_TYPE_UINT16 = 8, HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10, HCCL_DATA_TYPE_BFP16 = 11, HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_HIF8 = 14, HCCL_DATA_TYPE_FP8E4M3 = 15, HCCL_DATA_TYPE_FP8E5M2 = 16,
    HCCL_DATA_TYPE_FP8E8M0 = 17, HCCL_DATA_TYPE_RESERVED = 255
} HcclDataType;
typedef enum {
    HCCL_DETERMINISTIC = 0, HCCL_CONFIG_RESERVED = 1
} HcclConfig;
typedef enum {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0, HCCL_COMM_CONFIG_DETERMINISTIC = 1, HCCL_COMM_CONFIG_COMM_NAME
    = 2, HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3, HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
    HCCL_COMM_CONFIG_WORLD_RANKID = 5, HCCL_COMM_CONFIG_JOBID = 6,
    HCCL_COMM_CONFIG_ACLGRAPH_ZEROCOPY_ENABLE = 7, HCCL_COMM_CONFIG_EXEC_TIMEOUT = 8,
    HCCL_COMM_CONFIG_ALGO = 9, HCCL_COMM_CONFIG_RETRY = 10, HCCL_COMM_CONFIG_BUFFER_NAME = 11,
    HCCL_COMM_CONFIG_RESERVED = 12
} HcclCommConfigCapability;
typedef enum {
    HCCL_SEND = 0, HCCL_RECV = 1, HCCL_SEND_RECV_RESERVED = 2
} HcclSendRecvType;
typedef enum {
    HCCL_CMD_INVALID = 0, HCCL_CMD_BROADCAST = 1, HCCL_CMD_ALLREDUCE = 2, HCCL_CMD_REDUCE = 3,
    HCCL_CMD_SEND = 4, HCCL_CMD_RECEIVE = 5, HCCL_CMD_ALLGATHER = 6, HCCL_CMD_REDUCE_SCATTER = 7,
    HCCL_CMD_ALLTOALLV = 8, HCCL_CMD_ALLTOALLVC = 9, HCCL_CMD_ALLTOALL = 10, HCCL_CMD_GATHER = 11,
    HCCL_CMD_SCATTER = 12, HCCL_CMD_BATCH_SEND_RECV = 13, HCCL_CMD_BATCH_PUT = 14,
    HCCL_CMD_BATCH_GET = 15, HCCL_CMD_ALLGATHER_V = 16, HCCL_CMD_REDUCE_SCATTER_V = 17,
    HCCL_CMD_BATCH_WRITE = 18, HCCL_CMD_HALF_ALLTOALLV = 20, HCCL_CMD_ALL = 21, HCCL_CMD_FINALIZE =
    100, HCCL_CMD_INTER_GROUP_SYNC = 101, HCCL_CMD_INIT = 102, HCCL_CMD_BARRIER = 103, HCCL_CMD_MAX
    = 104
} HcclCMDType;
typedef enum {
    HCCL_COMM_STATUS_READY = 0, HCCL_COMM_STATUS_SUSPENDING = 1, HCCL_COMM_STATUS_INVALID = 254,
    HCCL_COMM_STATUS_RESERVED = 255
} HcclCommStatus;
typedef enum {
    HCCL_COMM_STATE_PHASE_INVALID = -1, HCCL_COMM_STATE_PHASE_DESTROY_PRE = 0,
    HCCL_COMM_STATE_PHASE_DESTROY_POST = 1, HCCL_COMM_STATE_PHASE_RESUME_PRE = 2,
    HCCL_COMM_STATE_PHASE_RESUME_POST = 3
} HcclCommStatePhase;
typedef enum {
    HCCL_OP_EXPANSION_MODE_INVALID = -1, HCCL_OP_EXPANSION_MODE_AI_CPU = 0,
    HCCL_OP_EXPANSION_MODE_AIV = 1, HCCL_OP_EXPANSION_MODE_HOST = 2, HCCL_OP_EXPANSION_MODE_HOST_TS
    = 3, HCCL_OP_EXPANSION_MODE_CCU_MS = 4, HCCL_OP_EXPANSION_MODE_CCU_SCHED = 5,
    HCCL_OP_EXPANSION_AIV_ONLY = 6
} HcclOpExpansionMode;
typedef enum {
    HCCL_CONFIG_TYPE_INVALID = -1, HCCL_CONFIG_TYPE_OP_EXPANSION_MODE = 0,
    HCCL_CONFIG_TYPE_HCCL_ALGO = 1
} HcclConfigType;
typedef enum {
    HCCL_DED_THREAD_TYPE_INVALID = -1, HCCL_DED_THREAD_TYPE_AICPU_LAUNCH = 0,
    HCCL_DED_THREAD_TYPE_AICPU_LAUNCH_GE = 1, HCCL_DED_THREAD_TYPE_AICPU_ORDER_LAUNCH_OPBASE = 2,
    HCCL_DED_THREAD_TYPE_AICPU_ORDER_LAUNCH_ACLGRAPH = 3, HCCL_DED_THREAD_TYPE_AICPU_ORDER_LAUNCH_GE
    = 4, HCCL_DED_THREAD_TYPE_AICPU_ORDER_LAUNCH_DEVICE = 5
} HcclDedicatedThreadType;
typedef enum {
    HCCL_CHANNEL_CONFIG_TYPE_INVALID = -1, HCCL_CHANNEL_CONFIG_TYPE_IS_SHARED_QUEUE = 0,
    HCCL_CHANNEL_CONFIG_TYPE_SHARED_QUEUE_TAG = 1
} HcclChannelConfigType;
typedef enum {
    THREAD_TYPE_INVALID = -1, THREAD_TYPE_TS = 0
} ThreadType;
typedef enum {
    COMM_ENGINE_RESERVED = -1, COMM_ENGINE_CPU = 0, COMM_ENGINE_CPU_TS = 1, COMM_ENGINE_AICPU = 2,
    COMM_ENGINE_AICPU_TS = 3, COMM_ENGINE_AIV = 4, COMM_ENGINE_CCU = 5
} CommEngine;
typedef enum {
    COMM_PROTOCOL_RESERVED = -1, COMM_PROTOCOL_HCCS = 0, COMM_PROTOCOL_ROCE = 1, COMM_PROTOCOL_PCIE
    = 2, COMM_PROTOCOL_SIO = 3, COMM_PROTOCOL_UB_CTP = 4, COMM_PROTOCOL_UBC_CTP = 4,
    COMM_PROTOCOL_UBC_TP = 5, COMM_PROTOCOL_UB_MEM = 6, COMM_PROTOCOL_UBOE = 7,
    COMM_PROTOCOL_HCCS_ONLY = 8, COMM_PROTOCOL_UB_RTP = 9, COMM_PROTOCOL_UBG = 9
} CommProtocol;
typedef enum {
    COMM_ADDR_TYPE_RESERVED = -1, COMM_ADDR_TYPE_IP_V4 = 0, COMM_ADDR_TYPE_IP_V6 = 1,
    COMM_ADDR_TYPE_ID = 2, COMM_ADDR_TYPE_EID = 3
} CommAddrType;
typedef enum {
    ENDPOINT_LOC_TYPE_RESERVED = -1, ENDPOINT_LOC_TYPE_DEVICE = 0, ENDPOINT_LOC_TYPE_HOST = 1
} EndpointLocType;
typedef enum {
    COMM_MEM_TYPE_INVALID = -1, COMM_MEM_TYPE_DEVICE = 0, COMM_MEM_TYPE_HOST = 1
} CommMemType;
typedef enum {
    HCOMM_SOCKET_ROLE_RESERVED = -1, HCOMM_SOCKET_ROLE_CLIENT = 0, HCOMM_SOCKET_ROLE_SERVER = 1
} HcommSocketRole;
typedef enum {
    HCOMM_ENDPOINT_FEATURE_INVALID = -1, HCOMM_ENDPOINT_FEATURE_NDA = 0
} HcommEndpointFeatureType;
typedef enum {
    THREAD_RES_TYPE_INVALID = -1, THREAD_RES_TYPE_STREAM = 0
} ThreadResType;
typedef enum {
    HCOMM_REDUCE_SUM = 0, HCOMM_REDUCE_PROD = 1, HCOMM_REDUCE_MAX = 2, HCOMM_REDUCE_MIN = 3,
    HCOMM_REDUCE_RESERVED = 255
} HcommReduceOp;
typedef enum {
    HCOMM_DATA_TYPE_INT8 = 0, HCOMM_DATA_TYPE_INT16 = 1, HCOMM_DATA_TYPE_INT32 = 2,
    HCOMM_DATA_TYPE_FP16 = 3, HCOMM_DATA_TYPE_FP32 = 4, HCOMM_DATA_TYPE_INT64 = 5,
    HCOMM_DATA_TYPE_UINT64 = 6, HCOMM_DATA_TYPE_UINT8 = 7, HCOMM_DATA_TYPE_UINT16 = 8,
    HCOMM_DATA_TYPE_UINT32 = 9, HCOMM_DATA_TYPE_FP64 = 10, HCOMM_DATA_TYPE_BFP16 = 11,
    HCOMM_DATA_TYPE_INT128 = 12, HCOMM_DATA_TYPE_HIF8 = 14, HCOMM_DATA_TYPE_FP8E4M3 = 15,
    HCOMM_DATA_TYPE_FP8E5M2 = 16, HCOMM_DATA_TYPE_FP8E8M0 = 17, HCOMM_DATA_TYPE_RESERVED = 255
} HcommDataType;
typedef enum {
    HCOMM_TRANSFER_TYPE_INVALID = -1, HCOMM_TRANSFER_TYPE_WRITE = 0,
    HCOMM_TRANSFER_TYPE_WRITE_REDUCE = 1, HCOMM_TRANSFER_TYPE_WRITE_WITH_NOTIFY = 2,
    HCOMM_TRANSFER_TYPE_WRITE_REDUCE_WITH_NOTIFY = 3, HCOMM_TRANSFER_TYPE_READ = 4,
    HCOMM_TRANSFER_TYPE_READ_REDUCE = 5, HCOMM_TRANSFER_TYPE_NOTIFY_RECORD = 6
} HcommTransferType;
typedef enum {
    HCOMM_CHANNEL_CONFIG_TYPE_INVALID = -1, HCOMM_CHANNEL_CONFIG_TYPE_IS_SHARED_QUEUE = 0
} HcommChannelConfigType;
typedef enum {
    ENDPOINT_ATTR_INVALID = -1, ENDPOINT_ATTR_BW_COEFF = 0, ENDPOINT_ATTR_DIE_ID = 1,
    ENDPOINT_ATTR_LOCATION = 2
} EndpointAttr;
typedef enum {
    COMM_TOPO_RESERVED = -1, COMM_TOPO_CLOS = 0, COMM_TOPO_1DMESH = 1, COMM_TOPO_910_93 = 2,
    COMM_TOPO_310P = 3, COMM_TOPO_A2AXSERVER = 4, COMM_TOPO_CUSTOM = 5
} CommTopo;
typedef enum {
    HCCL_HETEROG_MODE_INVALID = -1, HCCL_HETEROG_MODE_HOMOGENEOUS = 0, HCCL_HETEROG_MODE_MIX_A2_A3 =
    1
} HcclHeterogMode;
typedef enum {
    ACL_MEMCPY_HOST_TO_HOST = 0, ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3, ACL_MEMCPY_DEFAULT = 4, ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6, ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7
} aclrtMemcpyKind;
typedef enum {
    ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_HUGE_ONLY = 1, ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3, ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5, ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7, ACL_MEM_TYPE_LOW_BAND_WIDTH = 256,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 4096, ACL_MEM_ACCESS_USER_SPACE_READONLY = 1048576
} aclrtMemMallocPolicy;
/* ---- ACL graphs (acl/acl_rt.h:405-417, 4700-4833): handles and the capture enums ---- */
typedef void *aclmdlRI;
typedef void *aclrtTaskGrp;
typedef enum {
    ACL_MODEL_RI_CAPTURE_MODE_GLOBAL = 0, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL = 1,
    ACL_MODEL_RI_CAPTURE_MODE_RELAXED = 2
} aclmdlRICaptureMode;
typedef enum {
    ACL_MODEL_RI_CAPTURE_STATUS_NONE = 0, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE = 1,
    ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED = 2
} aclmdlRICaptureStatus;

typedef aclrtStream ThreadResTypeStream;
typedef HcclOpExpansionMode HcclConfigTypeOpExpansionMode;
typedef HcclResult (*HcclCommStateCallback)(HcclComm, HcclCommStatePhase, void *);

/* ---- structs: literal array bounds, layouts as compiled from the C++ headers ---- */
typedef struct HcclRootInfoDef { char internal[4108]; } HcclRootInfo;

/* HcclSetConfig takes this union by value; cffi cannot, so that parameter is declared int32_t. */
typedef union HcclConfigValue { int32_t value; } HcclConfigValue;

/* 2026-08 headers (version 11, 2248 bytes). */
typedef struct HcclCommConfigDef {
""" + _COMM_CONFIG_FIELDS + r"""    uint32_t hcclChannelSqDepth;
} HcclCommConfig;

/* 2026-04 headers (version 10, 2240 bytes): the same fields without hcclChannelSqDepth. */
typedef struct HcclCommConfigV10Def {
""" + _COMM_CONFIG_FIELDS + r"""} HcclCommConfigV10;

typedef struct HcclSendRecvItemDef {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

typedef struct {
    uint32_t version;
    uint32_t magicWord;
    uint32_t size;
    uint32_t reserved;
} CommAbiHeader;

struct in_addr { in_addr_t s_addr; };
struct in6_addr { union { uint8_t s6_addr[16]; uint32_t s6_addr32[4]; }; };
typedef struct in_addr in_addr;
typedef struct in6_addr in6_addr;

typedef struct {
    CommAddrType type;
    union {
        uint8_t raws[36];
        struct in_addr addr;
        struct in6_addr addr6;
        uint32_t id;
        uint8_t eid[16];
    };
} CommAddr;

typedef struct {
    EndpointLocType locType;
    union {
        uint8_t raws[60];
        struct { uint32_t devPhyId; uint32_t superDevId; uint32_t serverIdx; uint32_t superPodIdx; } device;
        struct { uint32_t id; } host;
    };
} EndpointLoc;

typedef struct {
    CommProtocol protocol;
    CommAddr commAddr;
    EndpointLoc loc;
    union { uint8_t raws[52]; };
} EndpointDesc;

typedef struct {
    CommAbiHeader header;
    uint16_t notifyNumPerThread;
    uint8_t reserved[14];
} ThreadConfig;

typedef struct {
    CommMemType type;
    void *addr;
    uint64_t size;
} CommMem;

typedef struct {
    CommAbiHeader header;
    uint32_t remoteRank;
    CommProtocol channelProtocol;
    EndpointDesc localEndpoint;
    EndpointDesc remoteEndpoint;
    uint32_t notifyNum;
    HcclMemHandle *memHandles;
    uint32_t memHandleNum;
    union {
        uint8_t raws[128];
        struct { uint32_t queueNum; uint32_t retryCnt; uint32_t retryInterval; uint8_t tc; uint8_t sl; } roceAttr;
        struct { uint8_t pathMode; } ubMemAttr;
    };
} HcclChannelDesc;

typedef struct {
    CommAbiHeader header;
    EndpointDesc remoteEndpoint;
    uint32_t notifyNum;
    bool exchangeAllMems;
    HcommMemHandle *memHandles;
    uint32_t memHandleNum;
    HcommSocket socket;
    HcommSocketRole role;
    uint16_t port;
    union {
        uint8_t raws[128];
        struct {
            uint32_t queueNum; uint32_t retryCnt; uint32_t retryInterval; uint8_t tc; uint8_t sl;
            uint32_t qpThreshold; uint32_t cqAttrFlags; uint16_t *srcPortList;
        } roceAttr;
        struct { uint32_t qos; } hccsAttr;
        struct { uint32_t sqDepth; } ubAttr;
        struct { uint8_t pathMode; } ubMemAttr;
    };
    uint32_t qos;
    const char *channelName;
} HcommChannelDesc;

typedef struct {
    HcommTransferType transType;
    uint8_t reserved[4];
    union {
        uint8_t raws[56];
        struct { uint64_t len; void *dst; void *src; } write;
        struct { uint64_t len; void *dst; void *src; } read;
        struct { uint64_t count; void *dst; void *src; HcommReduceOp reduceOp; HcommDataType dataType; } reduce;
        struct { uint32_t notifyIdx; } notifyRecord;
        struct { uint64_t len; void *dst; void *src; uint32_t notifyIdx; } writeWithNotify;
        struct {
            uint64_t count; void *dst; void *src; HcommReduceOp reduceOp; HcommDataType dataType; uint32_t notifyIdx;
        } writeReduceWithNotify;
    } transferInfo;
} HcommBatchTransferDesc;

typedef struct {
    CommAbiHeader header;
    EndpointDesc srcEndpointDesc;
    EndpointDesc dstEndpointDesc;
    union {
        uint8_t raws[128];
        struct { CommProtocol linkProtocol; uint8_t hop; };
    } linkAttr;
} CommLink;

typedef struct {
    void *buffer;
    uint8_t reserved[8];
    HcclCMDType cmdType;
    HcclDataType dataType;
    uint64_t count;
    uint32_t remoteRank;
    void *unfoldStream;
} HcclOpP2pDesc;

typedef struct {
    CommAbiHeader header;
    uint32_t opDescType;
    char opName[256];
    union { uint8_t raws[76]; HcclOpP2pDesc p2p; };
} HcclOpDesc;

typedef struct {
    char kernelSoName[256];
    char kernelFuncName[256];
    void *args;
    uint32_t argSize;
} HcclKernelFuncInfo;

typedef struct {
    CommAbiHeader header;
    uint64_t timeOut;
    uint8_t reserved[104];
} HcclKernelLaunchCfg;

typedef struct {
    ThreadHandle sendRecvThread;
    uint8_t opParams[8192];
} HcclP2pKernelParam;

typedef struct {
    uint32_t signalCount;
    uint32_t counterCount;
    uint32_t barrierCount;
    uint32_t reserved[5];
} HcommTeamSyncMemRequirement;

typedef struct {
    CommAbiHeader header;
    const uint32_t *rankIds;
    uint32_t rankNum;
    uint32_t selfRankId;
    uint32_t netLayer;
    CommProtocol protocol;
    HcommTeamSyncMemRequirement requirement;
    uint32_t reserved[4];
} HcclTeamCreateDesc;

typedef struct {
    CommAbiHeader header;
    CommEngine engine;
    uint32_t notifyNum;
    CommProtocol protocol;
    uint32_t channelCnt;
    uint32_t reserved[4];
} HcclTeamCreateChannelsDesc;

/* ---- custom operators: the ACL kernel-launch types (acl/acl_rt.h; hicann/runtime@681ef7610 include/external/acl/acl_rt.h:400-570) ---- */
typedef void *aclrtBinHandle;
typedef void *aclrtFuncHandle;
typedef void *aclrtArgsHandle;
typedef void *aclrtParamHandle;
typedef enum { ACL_RT_THREAD_LEVEL = 0 } aclrtLastErrLevel;
typedef enum {
    ACL_RT_BINARY_LOAD_OPT_LAZY_LOAD = 1, ACL_RT_BINARY_LOAD_OPT_LAZY_MAGIC = 2, ACL_RT_BINARY_LOAD_OPT_MAGIC = 2,
    ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE = 3
} aclrtBinaryLoadOptionType;
typedef union aclrtBinaryLoadOptionValue {
    uint32_t isLazyLoad;
    uint32_t magic;
    int32_t cpuKernelMode;
    uint32_t rsv[4];
} aclrtBinaryLoadOptionValue;
typedef struct {
    aclrtBinaryLoadOptionType type;
    aclrtBinaryLoadOptionValue value;
} aclrtBinaryLoadOption;
typedef struct aclrtBinaryLoadOptions {
    aclrtBinaryLoadOption *options;
    size_t numOpt;
} aclrtBinaryLoadOptions;
typedef enum { ACL_RT_ENGINE_TYPE_AIC = 0, ACL_RT_ENGINE_TYPE_AIV = 1 } aclrtEngineType;
typedef enum {
    ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE = 1, ACL_RT_LAUNCH_KERNEL_ATTR_LOCAL_MEMORY_SIZE = 2,
    ACL_RT_LAUNCH_KERNEL_ATTR_DYN_UBUF_SIZE = 2, ACL_RT_LAUNCH_KERNEL_ATTR_ENGINE_TYPE = 3,
    ACL_RT_LAUNCH_KERNEL_ATTR_BLOCKDIM_OFFSET = 4, ACL_RT_LAUNCH_KERNEL_ATTR_BLOCK_TASK_PREFETCH = 5,
    ACL_RT_LAUNCH_KERNEL_ATTR_DATA_DUMP = 6, ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT = 7,
    ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT_US = 8, ACL_RT_LAUNCH_KERNEL_ATTR_ENABLE_PROFILING = 9
} aclrtLaunchKernelAttrId;
typedef struct {
    uint32_t timeoutLow;
    uint32_t timeoutHigh;
} aclrtTimeoutUs;
typedef union aclrtLaunchKernelAttrValue {
    uint8_t schemMode;
    uint32_t localMemorySize;
    uint32_t dynUBufSize;
    aclrtEngineType engineType;
    uint32_t blockDimOffset;
    uint8_t isBlockTaskPrefetch;
    uint8_t isDataDump;
    uint16_t timeout;
    aclrtTimeoutUs timeoutUs;
    uint8_t enableProfiling;
    uint32_t rsv[4];
} aclrtLaunchKernelAttrValue;
typedef struct aclrtLaunchKernelAttr {
    aclrtLaunchKernelAttrId id;
    aclrtLaunchKernelAttrValue value;
} aclrtLaunchKernelAttr;
typedef struct aclrtLaunchKernelCfg {
    aclrtLaunchKernelAttr *attrs;
    size_t numAttrs;
} aclrtLaunchKernelCfg;

/* ---- ACL virtual memory, device modes and the profiler (acl/acl_rt.h, acl/acl_prof.h: hccl_test) ---- */
typedef enum {
    ACL_DDR_MEM = 0, ACL_HBM_MEM = 1, ACL_DDR_MEM_HUGE = 2, ACL_DDR_MEM_NORMAL = 3, ACL_HBM_MEM_HUGE = 4,
    ACL_HBM_MEM_NORMAL = 5, ACL_DDR_MEM_P2P_HUGE = 6, ACL_DDR_MEM_P2P_NORMAL = 7, ACL_HBM_MEM_P2P_HUGE = 8,
    ACL_HBM_MEM_P2P_NORMAL = 9, ACL_HBM_MEM_HUGE1G = 10, ACL_HBM_MEM_P2P_HUGE1G = 11, ACL_MEM_NORMAL = 12,
    ACL_MEM_HUGE = 13, ACL_MEM_HUGE1G = 14, ACL_MEM_P2P_NORMAL = 15, ACL_MEM_P2P_HUGE = 16, ACL_MEM_P2P_HUGE1G = 17
} aclrtMemAttr;
typedef enum {
    ACL_RT_OVERFLOW_MODE_SATURATION = 0, ACL_RT_OVERFLOW_MODE_INFNAN = 1, ACL_RT_OVERFLOW_MODE_UNDEF = 2
} aclrtFloatOverflowMode;
typedef enum {
    ACL_MEM_LOCATION_TYPE_HOST = 0, ACL_MEM_LOCATION_TYPE_DEVICE = 1, ACL_MEM_LOCATION_TYPE_UNREGISTERED = 2,
    ACL_MEM_LOCATION_TYPE_MANAGED = 3, ACL_MEM_LOCATION_TYPE_HOST_NUMA = 4
} aclrtMemLocationType;
typedef struct {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;
typedef enum { ACL_MEM_ALLOCATION_TYPE_PINNED = 0 } aclrtMemAllocationType;
typedef enum { ACL_MEM_HANDLE_TYPE_NONE = 0, ACL_MEM_HANDLE_TYPE_POSIX = 2 } aclrtMemHandleType;
typedef struct {
    aclrtMemHandleType handleType;
    aclrtMemAllocationType allocationType;
    aclrtMemAttr memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;
typedef enum {
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
    ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 65535
} aclrtMemGranularityOptions;
typedef enum {
    ACL_AICORE_ARITHMETIC_UTILIZATION = 0, ACL_AICORE_PIPE_UTILIZATION = 1, ACL_AICORE_MEMORY_BANDWIDTH = 2,
    ACL_AICORE_L0B_AND_WIDTH = 3, ACL_AICORE_RESOURCE_CONFLICT_RATIO = 4, ACL_AICORE_MEMORY_UB = 5,
    ACL_AICORE_L2_CACHE = 6, ACL_AICORE_PIPE_EXECUTE_UTILIZATION = 7, ACL_AICORE_MEMORY_ACCESS = 8,
    ACL_AICORE_NONE = 255
} aclprofAicoreMetrics;
typedef struct aclprofConfig aclprofConfig;
typedef struct aclprofAicoreEvents aclprofAicoreEvents;

/* ---- functions, grouped by the header that declares them ---- */
/* hccl/hccl_comm.h */
HcclResult HcclCommInitClusterInfo(const char* clusterInfo, uint32_t rank, HcclComm* comm);
HcclResult HcclCommInitClusterInfoConfig(const char* clusterInfo, uint32_t rank, HcclCommConfig* config, HcclComm* comm);
HcclResult HcclCreateSubCommConfig(HcclComm* comm, uint32_t rankNum, uint32_t* rankIds, uint64_t subCommId, uint32_t subCommRankId, HcclCommConfig* config, HcclComm* subComm);
HcclResult HcclGetRootInfo(HcclRootInfo* rootInfo);
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank, HcclComm* comm);
HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo* rootInfo, uint32_t rank, const HcclCommConfig* config, HcclComm* comm);
HcclResult HcclSetConfig(HcclConfig config, int32_t configValue);
HcclResult HcclGetConfig(HcclConfig config, HcclConfigValue* configValue);
HcclResult HcclGetCommName(HcclComm comm, char* commName);
HcclResult HcclCommGetHandleWithName(const char* commName, HcclComm* comm);
HcclResult HcclGetRankSize(HcclComm comm, uint32_t* rankSize);
HcclResult HcclGetRankId(HcclComm comm, uint32_t* rank);
HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);
HcclResult HcclCommDestroy(HcclComm comm);
HcclResult HcclCommInitAll(uint32_t ndev, int32_t* devices, HcclComm* comms);
HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult* asyncError);
const char* HcclGetErrorString(HcclResult code);
uint32_t HcclGetCommConfigCapability(void);
HcclResult HcclCommSuspend(HcclComm comm);
HcclResult HcclCommRegCommStateCallback(const char* regName, HcclCommStateCallback cb, void* args);
HcclResult HcclCommResume(HcclComm comm);
HcclResult HcclCommGetStatus(const char* commId, HcclCommStatus* status);
HcclResult HcclCommSetMemoryRange(HcclComm comm, void* baseVirPtr, size_t size, size_t alignment, uint64_t flags);
HcclResult HcclCommUnsetMemoryRange(HcclComm comm, void* baseVirPtr);
HcclResult HcclCommActivateCommMemory(HcclComm comm, void* virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
HcclResult HcclCommDeactivateCommMemory(HcclComm comm, void* virPtr);
HcclResult HcclCommWorkingDevNicSet(HcclComm comm, uint32_t* ranks, bool* useBackup, uint32_t nRanks);
HcclResult HcclGroupStart(void);
HcclResult HcclGroupEnd(void);
HcclResult HcclGroupStatusGet(bool* isGroupEnabled);
HcclResult HcclCommSymWinRegister(HcclComm comm, void* addr, uint64_t size, HcclCommSymWindow* winHandle, uint32_t flag);
HcclResult HcclCommSymWinDeregister(HcclCommSymWindow winHandle);
HcclResult HcclCommSymWinGet(HcclComm comm, void* ptr, size_t size, HcclCommSymWindow* winHandle, size_t* offset);
HcclResult HcclConfigGetInfo(HcclComm comm, HcclConfigType cfgType, uint32_t infoLen, void* info);
/* hccl/hccl_res.h */
HcclResult HcclGetHcclBuffer(HcclComm comm, void** buffer, uint64_t* size);
HcclResult HcclGetHcclBufferCleared(HcclComm comm, void** buffer, uint64_t* size);
HcclResult HcclThreadAcquire(HcclComm comm, CommEngine engine, uint32_t threadNum, uint32_t notifyNumPerThread, ThreadHandle* threads);
HcclResult HcclThreadAcquireWithConfig(HcclComm comm, CommEngine engine, uint32_t threadNum, ThreadType type, const ThreadConfig* config, ThreadHandle* threads);
HcclResult HcclThreadAcquireWithStream(HcclComm comm, CommEngine engine, aclrtStream stream, uint32_t notifyNum, ThreadHandle* thread);
HcclResult HcclDedicatedThreadAcquire(HcclComm comm, HcclDedicatedThreadType useType, uint32_t notifyNumPerThread, ThreadHandle* thread);
HcclResult HcclEngineCtxCreate(HcclComm comm, const char* ctxTag, CommEngine engine, uint64_t size, void** ctx);
HcclResult HcclEngineCtxGet(HcclComm comm, const char* ctxTag, CommEngine engine, void** ctx, uint64_t* size);
HcclResult HcclEngineCtxCopy(HcclComm comm, CommEngine engine, const char* ctxTag, const void* srcCtx, uint64_t size, uint64_t dstCtxOffset);
HcclResult HcclEngineCtxDestroy(HcclComm comm, const char* ctxTag, CommEngine engine);
HcclResult HcclCommMemReg(HcclComm comm, const char* memTag, const CommMem* mem, HcclMemHandle* memHandle);
HcclResult HcclThreadResGetInfo(HcclComm comm, ThreadHandle thread, ThreadResType resType, uint32_t infoLen, void** info);
/* hccl/hccl_channel.h */
HcclResult HcclChannelAcquire(HcclComm comm, CommEngine engine, const HcclChannelDesc* channelDescs, uint32_t channelNum, ChannelHandle* channels);
HcclResult HcclChannelConfigCreate(HcclChannelConfig* config);
HcclResult HcclChannelConfigDestroy(HcclChannelConfig config);
HcclResult HcclChannelConfigSetInt(HcclChannelConfig config, HcclChannelConfigType type, uint32_t value);
HcclResult HcclChannelConfigSetStr(HcclChannelConfig config, HcclChannelConfigType type, const char* value);
HcclResult HcclChannelAcquireWithConfig(HcclComm comm, CommEngine engine, const HcclChannelDesc* channelDescs, uint32_t channelNum, HcclChannelConfig config, ChannelHandle* channels);
HcclResult HcclChannelQuery(HcclComm comm, CommEngine engine, const HcclChannelDesc* channelDescs, uint32_t channelNum, ChannelHandle* channels);
HcclResult HcclChannelDestroy(HcclComm comm, const ChannelHandle* channels, uint32_t channelNum);
HcclResult HcclChannelGetHcclBuffer(HcclComm comm, ChannelHandle channel, void** buffer, uint64_t* size);
HcclResult HcclChannelGetRemoteMems(HcclComm comm, ChannelHandle channel, uint32_t* memNum, CommMem** remoteMems, char*** memTags);
/* hccl/hccl_launch.h */
HcclResult HcclAicpuKernelLaunch(HcclComm comm, const HcclOpDesc* opInfo, const HcclKernelFuncInfo* funcInfo, ThreadHandle aicpuThreadHandle, aclrtStream userStream, const HcclKernelLaunchCfg* kernelLaunchCfg);
/* hccl/hccl_rank_graph.h */
HcclResult HcclRankGraphGetLayers(HcclComm comm, uint32_t** netLayers, uint32_t* netLayerNum);
HcclResult HcclRankGraphGetRanksByLayer(HcclComm comm, uint32_t netLayer, uint32_t** ranks, uint32_t* rankNum);
HcclResult HcclRankGraphGetRankSizeByLayer(HcclComm comm, uint32_t netLayer, uint32_t* rankNum);
HcclResult HcclRankGraphGetTopoTypeByLayer(HcclComm comm, uint32_t netLayer, CommTopo* topoType);
HcclResult HcclRankGraphGetInstSizeListByLayer(HcclComm comm, uint32_t netLayer, uint32_t** instSizeList, uint32_t* listSize);
HcclResult HcclRankGraphGetLinks(HcclComm comm, uint32_t netLayer, uint32_t srcRank, uint32_t dstRank, CommLink** links, uint32_t* linkNum);
HcclResult HcclRankGraphGetTopoInstsByLayer(HcclComm comm, uint32_t netLayer, uint32_t** topoInsts, uint32_t* topoInstNum);
HcclResult HcclRankGraphGetTopoType(HcclComm comm, uint32_t netLayer, uint32_t topoInstId, CommTopo* topoType);
HcclResult HcclRankGraphGetRanksByTopoInst(HcclComm comm, uint32_t netLayer, uint32_t topoInstId, uint32_t** ranks, uint32_t* rankNum);
HcclResult HcclGetHeterogMode(HcclComm comm, HcclHeterogMode* mode);
HcclResult HcclRankGraphGetEndpointNum(HcclComm comm, uint32_t layer, uint32_t topoInstId, uint32_t* num);
HcclResult HcclRankGraphGetEndpointDesc(HcclComm comm, uint32_t layer, uint32_t topoInstId, uint32_t* descNum, EndpointDesc* endpointDesc);
HcclResult HcclRankGraphGetEndpointInfo(HcclComm comm, uint32_t rankId, const EndpointDesc* endpointDesc, EndpointAttr endpointAttr, uint32_t infoLen, void* info);
/* hccl/hccl_sym_win.h */
HcclResult HcclSymWinGetPeerPointer(HcclCommSymWindow winHandle, size_t offset, uint32_t peerRank, void** ptr);
/* hccl/hccl_team.h */
HcclResult HcclWorldTeamCreate(HcclComm comm, const HcclTeamCreateDesc* desc, HcommTeamHandle* worldTeam);
HcclResult HcclSubTeamCreate(HcommTeamHandle worldTeam, const HcclTeamCreateDesc* desc, HcommTeamHandle* team);
HcclResult HcclTeamDestroy(HcommTeamHandle team);
HcclResult HcclTeamWindowRegister(HcclComm comm, HcommTeamHandle worldTeam, const CommMem* localMem, HcommWindowHandle* window, uint32_t flag);
HcclResult HcclTeamWindowDeregister(HcommTeamHandle worldTeam, HcommWindowHandle window);
HcclResult HcclTeamChannelsCreate(HcclComm comm, HcommTeamHandle team, const HcclTeamCreateChannelsDesc* desc);
/* hccl/hccl_ccu_res.h */
HcclResult HcclCommAssignCcuIns(HcclComm comm, CcuInsHandle insHandle);
HcclResult HcclCommQueryCcuIns(HcclComm comm, CcuInsHandle* insHandles, uint32_t* insNum);
HcclResult HcclCommQueryAssignedCcuIns(HcclComm comm, CcuInsHandle* insHandles, uint32_t* insNum);
/* hcomm/hcomm_channel.h */
HcommResult HcommChannelCreate(EndpointHandle endpointHandle, CommEngine engine, HcommChannelDesc* channelDescs, uint32_t channelNum, ChannelHandle* channels);
HcommResult HcommChannelConfigCreate(HcommChannelConfig* config);
HcommResult HcommChannelConfigDestroy(HcommChannelConfig config);
HcommResult HcommChannelConfigSetInt(HcommChannelConfig config, HcommChannelConfigType type, uint32_t value);
HcommResult HcommChannelCreateWithConfig(EndpointHandle endpointHandle, CommEngine engine, HcommChannelDesc* channelDescs, uint32_t channelNum, HcommChannelConfig config, ChannelHandle* channels);
HcommResult HcommChannelGetStatus(const ChannelHandle* channelList, uint32_t listNum, int32_t* statusList);
HcommResult HcommChannelDestroy(const ChannelHandle* channels, uint32_t channelNum);
/* hcomm/hcomm_res.h */
HcommResult HcommEndpointCreate(const EndpointDesc* endpoint, EndpointHandle* endpointHandle);
HcommResult HcommEndpointDestroy(EndpointHandle endpointHandle);
HcommResult HcommEndpointGetDescNum(int32_t deviceLogicId, uint32_t* descNum);
HcommResult HcommEndpointGetDescs(int32_t deviceLogicId, uint32_t* descNum, EndpointDesc* endpointDescs);
HcommResult HcommMemReg(EndpointHandle endpointHandle, const char* memTag, const CommMem* mem, HcommMemHandle* memHandle);
HcommResult HcommMemUnreg(EndpointHandle endpointHandle, HcommMemHandle memHandle);
HcommResult HcommMemExport(EndpointHandle endpointHandle, HcommMemHandle memHandle, void** memDesc, uint32_t* memDescLen);
HcommResult HcommMemImport(EndpointHandle endpointHandle, const void* memDesc, uint32_t descLen, CommMem* outMem);
HcommResult HcommMemUnimport(EndpointHandle endpointHandle, const void* memDesc, uint32_t descLen);
HcommResult HcommThreadAlloc(CommEngine engine, uint32_t threadNum, const uint32_t* notifyNumPerThread, ThreadHandle* threads);
HcommResult HcommThreadFree(const ThreadHandle* threads, uint32_t threadNum);
HcommResult HcommEndpointGetListenPort(EndpointHandle endpointHandle, uint32_t* port);
HcommResult HcommThreadResGetInfo(ThreadHandle thread, ThreadResType resType, uint32_t infoLen, void** info);
HcommResult HcommEndpointCheckFeature(HcommEndpointFeatureType featureType, const EndpointDesc* endpointDesc, bool* value);
HcommResult HcommMemAlloc(void** ptr, size_t size);
HcommResult HcommMemFree(void* ptr);
/* hcomm/hcomm_primitives.h */
int32_t HcommLocalCopyOnThread(ThreadHandle thread, void* dst, const void* src, uint64_t len);
int32_t HcommLocalReduceOnThread(ThreadHandle thread, void* dst, const void* src, uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp);
int32_t HcommThreadNotifyRecordOnThread(ThreadHandle thread, ThreadHandle dstThread, uint32_t dstNotifyIdx);
int32_t HcommThreadNotifyWaitOnThread(ThreadHandle thread, uint32_t notifyIdx, uint32_t timeOut);
int32_t HcommAclrtNotifyRecordOnThread(ThreadHandle thread, uint64_t dstNotifyId);
int32_t HcommAclrtNotifyWaitOnThread(ThreadHandle thread, uint64_t notifyId, uint32_t timeOut);
int32_t HcommWriteOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommWriteReduceOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp);
int32_t HcommWriteWithNotifyOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len, uint32_t remoteNotifyIdx);
int32_t HcommWriteReduceWithNotifyOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp, uint32_t remoteNotifyIdx);
int32_t HcommReadOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommReadReduceOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t count, HcommDataType dataType, HcommReduceOp reduceOp);
int32_t HcommWriteNbiOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommWriteNbi(ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommWriteWithNotifyNbiOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len, uint32_t remoteNotifyIdx);
int32_t HcommWriteWithNotifyNbi(ChannelHandle channel, void* dst, const void* src, uint64_t len, uint32_t remoteNotifyIdx);
int32_t HcommReadNbiOnThread(ThreadHandle thread, ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommReadNbi(ChannelHandle channel, void* dst, const void* src, uint64_t len);
int32_t HcommBatchTransferOnThread(ThreadHandle thread, ChannelHandle channel, const HcommBatchTransferDesc* transferDescs, uint32_t transferDescNum);
int32_t HcommChannelNotifyRecordOnThread(ThreadHandle thread, ChannelHandle channel, uint32_t remoteNotifyIdx);
int32_t HcommChannelNotifyRecord(ChannelHandle channel, uint32_t remoteNotifyIdx);
int32_t HcommChannelNotifyWaitOnThread(ThreadHandle thread, ChannelHandle channel, uint32_t localNotifyIdx, uint32_t timeOut);
int32_t HcommChannelNotifyWait(ChannelHandle channel, uint32_t localNotifyIdx, uint32_t timeOut);
HcommResult HcommAicpuTsTaskCacheLookup(const char* tag, bool* isHit);
HcommResult HcommAicpuTsTaskCacheStart(const char* tag, void** addrs, uint64_t* sizes, uint64_t count);
HcommResult HcommAicpuTsTaskCacheEnd(const char* tag);
HcommResult HcommAicpuTsTaskCacheExecute(const char* tag, void** addrs, uint64_t* sizes, uint64_t count);
HcommResult HcommAicpuTsTaskCacheClear(const char* tag);
int32_t HcommBatchModeStart(const char* batchTag);
int32_t HcommBatchModeEnd(const char* batchTag);
int32_t HcommAcquireComm(const char* commId);
int32_t HcommReleaseComm(const char* commId);
int32_t HcommFenceOnThread(ThreadHandle thread);
int32_t HcommChannelFenceOnThread(ThreadHandle thread, ChannelHandle channel);
int32_t HcommChannelFence(ChannelHandle channel);
int32_t HcommSetNotifyWaitTimeOut(float timeOut);
int32_t HcommThreadResAcquireTimeOut(float timeOut);
int32_t HcommChannelNotifyWaitOnThreadWithDefaultTimeout(ThreadHandle thread, ChannelHandle channel, uint32_t localNotifyIdx);
int32_t HcommThreadNotifyWaitOnThreadWithDefaultTimeout(ThreadHandle thread, uint32_t notifyIdx);
int32_t HcommChannelDrainOnThread(ThreadHandle thread, ChannelHandle channel);
/* hccl/hccl.h */
HcclResult HcclAllReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclBroadcast(void* buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm, aclrtStream stream);
HcclResult HcclReduceScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclReduceScatterV(void* sendBuf, const void* sendCounts, const void* sendDispls, void* recvBuf, uint64_t recvCount, HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclScatter(void* sendBuf, void* recvBuf, uint64_t recvCount, HcclDataType dataType, uint32_t root, HcclComm comm, aclrtStream stream);
HcclResult HcclAllGather(void* sendBuf, void* recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm, aclrtStream stream);
HcclResult HcclAllGatherV(void* sendBuf, uint64_t sendCount, void* recvBuf, const void* recvCounts, const void* recvDispls, HcclDataType dataType, HcclComm comm, aclrtStream stream);
HcclResult HcclSend(void* sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank, HcclComm comm, aclrtStream stream);
HcclResult HcclRecv(void* recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank, HcclComm comm, aclrtStream stream);
HcclResult HcclAlltoAllVC(const void* sendBuf, const void* sendCountMatrix, HcclDataType sendType, const void* recvBuf, HcclDataType recvType, HcclComm comm, aclrtStream stream);
HcclResult HcclAlltoAllV(const void* sendBuf, const void* sendCounts, const void* sdispls, HcclDataType sendType, const void* recvBuf, const void* recvCounts, const void* rdispls, HcclDataType recvType, HcclComm comm, aclrtStream stream);
HcclResult HcclAlltoAll(const void* sendBuf, uint64_t sendCount, HcclDataType sendType, const void* recvBuf, uint64_t recvCount, HcclDataType recvType, HcclComm comm, aclrtStream stream);
HcclResult HcclReduce(void* sendBuf, void* recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream stream);
HcclResult HcclBatchSendRecv(HcclSendRecvItem* sendRecvInfo, uint32_t itemNum, HcclComm comm, aclrtStream stream);
/* hccl/hccl_mc2.h */
HcclResult HcclKfcAllocOpArgs(void** opArgs);
HcclResult HcclKfcFreeOpArgs(void* opArgs);
HcclResult HcclKfcOpArgsSetSrcDataType(void* opArgs, uint8_t srcDataType);
HcclResult HcclKfcOpArgsSetDstDataType(void* opArgs, uint8_t dstDataType);
HcclResult HcclKfcOpArgsSetReduceType(void* opArgs, uint32_t reduceType);
HcclResult HcclKfcOpArgsSetCount(void* opArgs, uint64_t count);
HcclResult HcclKfcOpArgsSetAlgConfig(void* opArgs, char* algConfig);
HcclResult HcclKfcOpArgsSetCommEngine(void* opArgs, uint8_t commEngine);
HcclResult HcclCreateOpResCtx(HcclComm comm, uint8_t opType, void* opArgs, void** opResCtx);
/* acl/acl_rt.h */
aclError aclInit(const char* configPath);
aclError aclFinalize(void);
const char* aclGetRecentErrMsg(void);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDevice(int32_t* deviceId);
aclError aclrtSynchronizeDevice(void);
aclError aclrtGetDeviceCount(uint32_t* count);
aclError aclrtCreateEvent(aclrtEvent* event);
aclError aclrtCreateEventWithFlag(aclrtEvent* event, uint32_t flag);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void* devPtr);
aclError aclrtMallocHost(void** hostPtr, size_t size);
aclError aclrtFreeHost(void* hostPtr);
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtCreateStream(aclrtStream* stream);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
/* ---- ACL graphs (acl/acl_rt.h) ---- */
aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode);
aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus* status, aclmdlRI* modelRI);
aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI* modelRI);
aclError aclmdlRICaptureThreadExchangeMode(aclmdlRICaptureMode* mode);
aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream);
aclError aclmdlRIExecute(aclmdlRI modelRI, int32_t timeout);
aclError aclmdlRIDestroy(aclmdlRI modelRI);
aclError aclmdlRICaptureTaskGrpBegin(aclrtStream stream);
aclError aclmdlRICaptureTaskGrpEnd(aclrtStream stream, aclrtTaskGrp* handle);
aclError aclmdlRICaptureTaskUpdateBegin(aclrtStream stream, aclrtTaskGrp handle);
aclError aclmdlRICaptureTaskUpdateEnd(aclrtStream stream);
/* ---- custom operators: kernel launch (acl/acl_rt.h) ---- */
aclError aclrtBinaryLoadFromFile(const char* binPath, aclrtBinaryLoadOptions* options, aclrtBinHandle* binHandle);
aclError aclrtBinaryUnLoad(aclrtBinHandle binHandle);
aclError aclrtBinaryGetFunction(const aclrtBinHandle binHandle, const char* kernelName, aclrtFuncHandle* funcHandle);
aclError aclrtKernelArgsInit(aclrtFuncHandle funcHandle, aclrtArgsHandle* argsHandle);
aclError aclrtKernelArgsAppend(aclrtArgsHandle argsHandle, void* param, size_t paramSize, aclrtParamHandle* paramHandle);
aclError aclrtKernelArgsFinalize(aclrtArgsHandle argsHandle);
aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t numBlocks, aclrtStream stream, aclrtLaunchKernelCfg* cfg, aclrtArgsHandle argsHandle, void* reserve);
aclError aclrtGetLastError(aclrtLastErrLevel level);
/* acl/acl_base_rt.h */
const char* aclrtGetSocName(void);
/* ---- ACL virtual memory, events with timing, device modes (acl/acl_rt.h: hccl_test) ---- */
/* acl/acl_rt.h */
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent);
aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode);
aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode* mode);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t* free, size_t* total);
aclError aclrtReserveMemAddress(void** virPtr, size_t size, size_t alignment, void* expectPtr, uint64_t flags);
aclError aclrtReleaseMemAddress(void* virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle* handle, size_t size, const aclrtPhysicalMemProp* prop, uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void* virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
aclError aclrtUnmapMem(void* virPtr);
aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp* prop, aclrtMemGranularityOptions option, size_t* granularity);
/* acl/acl_prof.h */
aclError aclprofInit(const char* profilerResultPath, size_t length);
aclError aclprofFinalize(void);
aclError aclprofStart(const aclprofConfig* profilerConfig);
aclprofConfig* aclprofCreateConfig(uint32_t* deviceIdList, uint32_t deviceNums, aclprofAicoreMetrics aicoreMetrics, const aclprofAicoreEvents* aicoreEvents, uint64_t dataTypeConfig);
aclError aclprofDestroyConfig(const aclprofConfig* profilerConfig);
aclError aclprofStop(const aclprofConfig* profilerConfig);
"""
