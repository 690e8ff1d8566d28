# ferry_image: JPEG / PNG decoding and the resampling of vision preprocessing. libjpeg-turbo, libpng and
# zlib (Debian: libjpeg-dev, libpng-dev, zlib1g-dev) are linked statically so the binary travels
# (docs/ARCHITECTURE.md §7).
ferry_module(image DEPS base SOURCES
  image/decode.cc
  image/resize.cc
)
find_library(FERRY_JPEG_STATIC NAMES libjpeg.a REQUIRED)
find_library(FERRY_PNG_STATIC NAMES libpng16.a libpng.a REQUIRED)
find_library(FERRY_Z_STATIC NAMES libz.a REQUIRED)
find_path(FERRY_JPEG_INCLUDE jpeglib.h REQUIRED)
find_path(FERRY_PNG_INCLUDE png.h REQUIRED)
target_include_directories(ferry_image PRIVATE ${FERRY_JPEG_INCLUDE} ${FERRY_PNG_INCLUDE})
target_link_libraries(ferry_image PUBLIC ${FERRY_PNG_STATIC} ${FERRY_JPEG_STATIC} ${FERRY_Z_STATIC} m)
