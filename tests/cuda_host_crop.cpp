// Builds ort_roi/kernels/cuda/roi_ops.cu for the host (g++) with CropAndResize's kernel
// exported, as tests/cuda_host.cpp does for the others: tests/test_crop_and_resize.py runs the
// CUDA arithmetic under the backend's own Python code (tests/fake_cupy.py) without a GPU.
#include <cmath>
using std::ceil;
using std::floor;
using std::isnan;
using std::round;

#define ORT_ROI_HOST
#define ORT_ROI_LOOP(i, n) for (long long i = 0; i < (n); ++i)
#define ORT_ROI_DEVICE inline
#define __global__

#include "../ort_roi/kernels/cuda/roi_ops.cu"

#define ORT_ROI_EXPORT_CROP(T, S, CB)                                                         \
  extern "C" void crop_and_resize_##S##_##CB(const T* X, const int* geo, const float* w,      \
                                             float* out, long long n, int C, int H, int W,    \
                                             int CH, int CW, int mode, float ext) {           \
    crop_and_resize<T, CB>(X, geo, w, out, n, C, H, W, CH, CW, mode, ext);                    \
  }

ORT_ROI_EXPORT_CROP(float, f, 8)
ORT_ROI_EXPORT_CROP(double, d, 8)
ORT_ROI_EXPORT_CROP(float, f, 4)
ORT_ROI_EXPORT_CROP(double, d, 4)
ORT_ROI_EXPORT_CROP(float, f, 2)
ORT_ROI_EXPORT_CROP(double, d, 2)
