/* The dtype table: sizes, names and kinds (see dtype.h). */
#include "graph/dtype.h"

size_t fr_dtype_size(fr_dtype dt)
{
    switch (dt) {
    case FR_F32: case FR_I32: case FR_U32: return 4;
    case FR_U8: case FR_I8: case FR_BOOL:
    case FR_F8E4M3: case FR_F8E4M3FNUZ: case FR_F8E5M2: case FR_F8E5M2FNUZ: return 1;
    case FR_U16: case FR_I16: case FR_F16: case FR_BF16: return 2;
    case FR_I64: case FR_U64: case FR_F64: return 8;
    default: return 0;
    }
}

const char *fr_dtype_name(fr_dtype dt)
{
    switch (dt) {
    case FR_UNDEFINED: return "undefined";
    case FR_F32: return "float32";
    case FR_U8: return "uint8";
    case FR_I8: return "int8";
    case FR_U16: return "uint16";
    case FR_I16: return "int16";
    case FR_I32: return "int32";
    case FR_I64: return "int64";
    case FR_STRING: return "string";
    case FR_BOOL: return "bool";
    case FR_F16: return "float16";
    case FR_F64: return "float64";
    case FR_U32: return "uint32";
    case FR_U64: return "uint64";
    case FR_BF16: return "bfloat16";
    case FR_F8E4M3: return "float8e4m3fn";
    case FR_F8E4M3FNUZ: return "float8e4m3fnuz";
    case FR_F8E5M2: return "float8e5m2";
    case FR_F8E5M2FNUZ: return "float8e5m2fnuz";
    }
    return "unknown-dtype";
}

int fr_dtype_is_float(fr_dtype dt)
{
    return dt == FR_F32 || dt == FR_F64 || dt == FR_F16 || dt == FR_BF16 || dt == FR_F8E4M3 ||
           dt == FR_F8E5M2 || dt == FR_F8E4M3FNUZ || dt == FR_F8E5M2FNUZ;
}

int fr_dtype_is_int(fr_dtype dt)
{
    return dt == FR_U8 || dt == FR_I8 || dt == FR_U16 || dt == FR_I16 || dt == FR_I32 ||
           dt == FR_I64 || dt == FR_U32 || dt == FR_U64;
}
