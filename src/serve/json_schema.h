// JsonSchema: a JSON Schema (the subset structured outputs use) compiled into the graph that JsonPrefix
// walks while a reply is generated (`response_format: {"type": "json_schema", ...}`).
// Supported: `type` (one name or a list), `properties` / `required` / `additionalProperties` of objects,
// `items` / `minItems` / `maxItems` of arrays, `minLength` / `maxLength` of strings, `minimum` / `maximum` /
// `exclusiveMinimum` / `exclusiveMaximum` of integers, `enum`, `const`, `anyOf` / `oneOf`, `allOf` of one schema,
// `$ref` into `$defs` / `definitions` (recursion included), and the annotations (`title`, `description`,
// `default`, `examples`, `format`, `$schema`, `$id`, `$comment`, `strict`), which constrain nothing.
// Any other keyword is an error naming it: a constraint ferry cannot keep is refused, not ignored.
// Generation may be stricter than the schema (its output still validates): an object's keys are its
// `properties`, each at most once, in any order, and `additionalProperties` adds none.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace ferry::serve {

struct SchemaNode {
  enum class Kind : uint8_t {
    kAny,      // any JSON value
    kObject,   // keys: the property names (or, when open, any string), values per key
    kArray,
    kString,
    kInteger,
    kNumber,
    kLiteral,  // exactly `text` (an enum member or const, true / false / null)
    kUnion,    // any of `alts`
  };
  Kind kind = Kind::kAny;
  // kObject: property i is keys[i] (its JSON text, quotes included) with a value of values[i]; `required`
  // has bit i set when it must appear. open: any keys instead, each with an `any_value` value.
  std::vector<std::string> keys;
  std::vector<const SchemaNode*> values;
  uint64_t required = 0;
  bool open = false;
  const SchemaNode* any_value = nullptr;
  // kArray
  const SchemaNode* items = nullptr;
  int64_t min_items = 0, max_items = INT64_MAX;
  // kString: length in characters (code points; an escape is one)
  int64_t min_length = 0, max_length = INT64_MAX;
  // kInteger: the range of values (minimum / maximum / exclusiveMinimum / exclusiveMaximum)
  int64_t min_value = INT64_MIN, max_value = INT64_MAX;
  bool bounded() const { return min_value != INT64_MIN || max_value != INT64_MAX; }
  // kLiteral
  std::string text;
  // kUnion
  std::vector<const SchemaNode*> alts;
};

class JsonSchema {
 public:
  static constexpr size_t kMaxProperties = 64;

  // Any JSON object (JSON mode, `json_object`).
  static std::shared_ptr<const JsonSchema> any_object();
  // Compiles `schema`; the root must be an object. Errors name the keyword and where it is
  // (e.g. "properties.tags.items: 'pattern' is not supported").
  static Expected<std::shared_ptr<const JsonSchema>> compile(const nlohmann::json& schema);

  const SchemaNode* root() const { return root_; }

 private:
  friend class SchemaCompiler;
  std::vector<std::unique_ptr<SchemaNode>> nodes_;
  const SchemaNode* root_ = nullptr;
};

}  // namespace ferry::serve
