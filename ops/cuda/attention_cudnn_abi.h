/* The part of cuDNN 9's backend API (cudnn_graph.h) that attention_cudnn.c uses, declared here
 * so that fp8run builds where cuDNN's headers are absent and loads the library at run time
 * (attention_cudnn_load.c, dlopen). The numbers are cuDNN's ABI, unchanged across 9.x (NVIDIA
 * keeps the backend enums stable within a major version); attention_cudnn_load.c checks every
 * one against cudnn_graph.h at compile time when that header is present. Everything here exists
 * in cuDNN 9.0, so the 9.14 of the GPU machines has it (ragged offsets are used from 9.6 only). Enum-typed arguments are passed as int
 * (cuDNN's enums are int-sized). */
#ifndef FR_ATTENTION_CUDNN_ABI_H
#define FR_ATTENTION_CUDNN_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef void *frdnn_desc;                    /* cudnnBackendDescriptor_t */
typedef struct frdnn_context *frdnn_handle;  /* cudnnHandle_t */

/* cudnnStatus_t */
#define FRDNN_STATUS_SUCCESS 0

/* cudnnBackendDescriptorType_t */
enum {
    FRDNN_POINTWISE_DESCRIPTOR = 0,
    FRDNN_ENGINE_DESCRIPTOR = 2,
    FRDNN_ENGINECFG_DESCRIPTOR = 3,
    FRDNN_ENGINEHEUR_DESCRIPTOR = 4,
    FRDNN_EXECUTION_PLAN_DESCRIPTOR = 5,
    FRDNN_OPERATION_POINTWISE_DESCRIPTOR = 13,
    FRDNN_OPERATIONGRAPH_DESCRIPTOR = 15,
    FRDNN_VARIANT_PACK_DESCRIPTOR = 16,
    FRDNN_TENSOR_DESCRIPTOR = 17,
    FRDNN_MATMUL_DESCRIPTOR = 18,
    FRDNN_OPERATION_MATMUL_DESCRIPTOR = 19,
    FRDNN_REDUCTION_DESCRIPTOR = 21,
    FRDNN_OPERATION_REDUCTION_DESCRIPTOR = 22,
    FRDNN_OPERATION_RESHAPE_DESCRIPTOR = 31,
};

/* cudnnBackendAttributeName_t */
enum {
    FRDNN_ATTR_POINTWISE_MODE = 0,
    FRDNN_ATTR_POINTWISE_MATH_PREC = 1,
    FRDNN_ATTR_POINTWISE_AXIS = 9,
    FRDNN_ATTR_ENGINEHEUR_MODE = 200,
    FRDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
    FRDNN_ATTR_ENGINEHEUR_RESULTS = 202,
    FRDNN_ATTR_ENGINECFG_ENGINE = 300,
    FRDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
    FRDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
    FRDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
    FRDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750,
    FRDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
    FRDNN_ATTR_OPERATION_POINTWISE_BDESC = 752,
    FRDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
    FRDNN_ATTR_OPERATION_POINTWISE_DXDESC = 756,
    FRDNN_ATTR_OPERATION_POINTWISE_DYDESC = 757,
    FRDNN_ATTR_OPERATION_POINTWISE_TDESC = 758,
    FRDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
    FRDNN_ATTR_OPERATIONGRAPH_OPS = 801,
    FRDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
    FRDNN_ATTR_TENSOR_DATA_TYPE = 901,
    FRDNN_ATTR_TENSOR_DIMENSIONS = 902,
    FRDNN_ATTR_TENSOR_STRIDES = 903,
    FRDNN_ATTR_TENSOR_UNIQUE_ID = 906,
    FRDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
    FRDNN_ATTR_TENSOR_IS_BY_VALUE = 908,
    FRDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC = 913, /* per-batch start offsets (variable-length sequences) */
    FRDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    FRDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    FRDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
    FRDNN_ATTR_ENGINE_NUMERICAL_NOTE = 1303,
    FRDNN_ATTR_MATMUL_COMP_TYPE = 1500,
    FRDNN_ATTR_OPERATION_MATMUL_ADESC = 1520,
    FRDNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
    FRDNN_ATTR_OPERATION_MATMUL_CDESC = 1522,
    FRDNN_ATTR_OPERATION_MATMUL_DESC = 1523,
    FRDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC = 1525,
    FRDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC = 1526,
    FRDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC = 1527,
    FRDNN_ATTR_REDUCTION_OPERATOR = 1600,
    FRDNN_ATTR_REDUCTION_COMP_TYPE = 1601,
    FRDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610,
    FRDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
    FRDNN_ATTR_OPERATION_REDUCTION_DESC = 1612,
    FRDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200,
    FRDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201,
};

/* cudnnBackendAttributeType_t */
enum {
    FRDNN_TYPE_HANDLE = 0,
    FRDNN_TYPE_DATA_TYPE = 1,
    FRDNN_TYPE_BOOLEAN = 2, /* C99 bool */
    FRDNN_TYPE_INT64 = 3,
    FRDNN_TYPE_VOID_PTR = 6,
    FRDNN_TYPE_HEUR_MODE = 8,
    FRDNN_TYPE_NUMERICAL_NOTE = 11,
    FRDNN_TYPE_POINTWISE_MODE = 14,
    FRDNN_TYPE_BACKEND_DESCRIPTOR = 15,
    FRDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18,
};

/* cudnnDataType_t */
enum {
    FRDNN_DATA_FLOAT = 0,
    FRDNN_DATA_HALF = 2,
    FRDNN_DATA_INT32 = 4,
    FRDNN_DATA_BFLOAT16 = 9,
    FRDNN_DATA_INT64 = 10,
    FRDNN_DATA_BOOLEAN = 11,
    FRDNN_DATA_FP8_E4M3 = 12,
    FRDNN_DATA_FP8_E5M2 = 13,
};

/* cudnnPointwiseMode_t */
enum {
    FRDNN_POINTWISE_ADD = 0,
    FRDNN_POINTWISE_MUL = 1,
    FRDNN_POINTWISE_DIV = 6,
    FRDNN_POINTWISE_SUB = 9,
    FRDNN_POINTWISE_EXP = 13,
    FRDNN_POINTWISE_LOG = 15,
    FRDNN_POINTWISE_IDENTITY = 21,
    FRDNN_POINTWISE_TANH_FWD = 101,
    FRDNN_POINTWISE_TANH_BWD = 201,
    FRDNN_POINTWISE_CMP_EQ = 300,
    FRDNN_POINTWISE_CMP_GT = 302,
    FRDNN_POINTWISE_CMP_GE = 303,
    FRDNN_POINTWISE_CMP_LT = 304,
    FRDNN_POINTWISE_CMP_LE = 305,
    FRDNN_POINTWISE_LOGICAL_AND = 400,
    FRDNN_POINTWISE_GEN_INDEX = 501,
    FRDNN_POINTWISE_BINARY_SELECT = 601,
};

/* cudnnReduceTensorOp_t */
enum {
    FRDNN_REDUCE_TENSOR_ADD = 0,
    FRDNN_REDUCE_TENSOR_MAX = 3,
    FRDNN_REDUCE_TENSOR_AMAX = 4,
};

/* cudnnBackendNumericalNote_t (an engine's notes: --deterministic skips engines with this one) */
enum {
    FRDNN_NUMERICAL_NOTE_NONDETERMINISTIC = 4,
    FRDNN_NUMERICAL_NOTE_TYPE_COUNT = 10, /* 9.19 header's count: the most notes asked for (as cudnn-frontend) */
};

/* cudnnBackendHeurMode_t */
enum {
    FRDNN_HEUR_MODE_FALLBACK = 2,
    FRDNN_HEUR_MODE_A = 3,
};

/* The entry points, resolved with dlsym (signatures as in cudnn_graph.h). */
typedef struct frdnn_api {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(int status);
    void (*GetLastErrorString)(char *message, size_t max_size);
    int (*Create)(frdnn_handle *handle);
    int (*Destroy)(frdnn_handle handle);
    int (*SetStream)(frdnn_handle handle, void *stream); /* cudaStream_t */
    int (*BackendCreateDescriptor)(int type, frdnn_desc *desc);
    int (*BackendDestroyDescriptor)(frdnn_desc desc);
    int (*BackendFinalize)(frdnn_desc desc);
    int (*BackendSetAttribute)(frdnn_desc desc, int name, int type, int64_t count, const void *elements);
    int (*BackendGetAttribute)(frdnn_desc desc, int name, int type, int64_t requested, int64_t *count,
                               void *elements);
    int (*BackendExecute)(frdnn_handle handle, frdnn_desc plan, frdnn_desc variant_pack);
} frdnn_api;

#endif
