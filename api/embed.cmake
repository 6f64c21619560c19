# api/embed.cmake - writes a file into a C source as a byte array, after
# checking that it is valid JSON:
#   cmake -DIN=openapi.json -DOUT=api_openapi_json.c -DNAME=api_openapi_json
#         -DHEADER=api/openapi.h -P embed.cmake
file(READ "${IN}" text)
string(JSON kind ERROR_VARIABLE json_error TYPE "${text}")
if(json_error)
  message(FATAL_ERROR "${IN}: not valid JSON: ${json_error}")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR bytes "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])"
       "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE "${OUT}.tmp"
     "/* generated from ${IN} by api/embed.cmake; do not edit */\n"
     "#include \"${HEADER}\"\n\n"
     "const unsigned char ${NAME}[] = {\n${hex}0x00\n};\n"
     "const size_t ${NAME}_len = ${bytes};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
