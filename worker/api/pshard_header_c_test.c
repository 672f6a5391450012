/* pshard.h compiled as C, as a C program includes it: its enums are C ints,
 * and values no enum names, passed from C, are refused with an error that
 * names them (in C++ they are values of the enums, so the checks are sound). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "worker/api/pshard.h"

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: failed: %s (last error: %s)\n",        \
              __FILE__, __LINE__, #cond, pshardGetLastError());      \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(void) {
  CHECK(sizeof(pshardResult_t) == sizeof(int));
  CHECK(sizeof(pshardDataType_t) == sizeof(int));
  CHECK(sizeof(pshardMemory_t) == sizeof(int));
  CHECK(sizeof(pshardCommMode_t) == sizeof(int));
  CHECK(pshardGetVersion() == PSHARD_API_VERSION);

  CHECK(strcmp(pshardGetErrorString(pshardInvalidArgument),
               "invalid argument") == 0);
  CHECK(strcmp(pshardGetErrorString((pshardResult_t)-7),
               "unknown result code") == 0);

  /* The enum arguments are checked before the session is looked at. */
  const int64_t shape[1] = {4};
  int index = -1;
  CHECK(pshardRegisterParameter(NULL, "w", 1, shape, pshardFloat32,
                                (pshardMemory_t)-1,
                                &index) == pshardInvalidArgument);
  CHECK(strstr(pshardGetLastError(), "memory -1 is not a pshardMemory_t"));
  CHECK(pshardRegisterParameter(NULL, "w", 1, shape, (pshardDataType_t)1000,
                                pshardHostMemory,
                                &index) == pshardInvalidArgument);
  CHECK(strstr(pshardGetLastError(), "dtype 1000 is not a pshardDataType_t"));
  CHECK(index == -1);
  printf("pshard.h as C: ok\n");
  return 0;
}
