// JsonSchema (json_schema.h): the compiler. Nodes live in the schema's vector; a `$ref` is compiled once
// per target (a placeholder first, so a recursive reference finds it) and shared.
#include "serve/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace ferry::serve {

using json = nlohmann::json;

namespace {

const std::set<std::string> kAnnotations = {"title",   "description", "default", "examples", "format",
                                            "$schema", "$id",         "$comment", "strict",  "$defs",
                                            "definitions", "readOnly", "writeOnly", "deprecated"};
const std::set<std::string> kKnown = {"type",  "properties", "required", "additionalProperties", "items",
                                      "minItems", "maxItems", "enum",   "const",    "anyOf",
                                      "oneOf", "allOf",      "$ref",  "minLength", "maxLength",
                                      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
// Keywords of numbers: kept for integers only (a number's range is not a property of its digits so far).
const char* const kRangeKeys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

std::string where_of(const std::string& path) { return path.empty() ? "the schema" : path; }

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root, JsonSchema* out) : root_(root), out_(out) {}

  Expected<const SchemaNode*> node(const json& s, const std::string& path, int depth) {
    if (depth > 64) return fail(path, "is nested too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return fail(path, "is `false`, which no value matches");
      return make(SchemaNode::Kind::kAny);
    }
    if (!s.is_object()) return fail(path, "must be an object");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKnown.count(it.key()) && !kAnnotations.count(it.key()))
        return fail(path, "'" + it.key() + "' is not supported");

    if (const auto r = s.find("$ref"); r != s.end()) {
      if (s.size() > 1)
        for (auto it = s.begin(); it != s.end(); ++it)
          if (it.key() != "$ref" && kKnown.count(it.key()))
            return fail(path, "'$ref' beside '" + it.key() + "' is not supported");
      return ref(*r, path, depth);
    }
    if (const auto a = s.find("allOf"); a != s.end()) {
      if (!a->is_array() || a->size() != 1) return fail(path + ".allOf", "must hold exactly one schema here");
      return node((*a)[0], path + ".allOf[0]", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (const auto a = s.find(key); a != s.end()) {
        if (!a->is_array() || a->empty()) return fail(path + "." + key, "must be a non-empty array of schemas");
        std::vector<const SchemaNode*> alts;
        for (size_t i = 0; i < a->size(); ++i) {
          FERRY_ASSIGN_OR_RETURN(const SchemaNode* n, node((*a)[i], path + "." + key + "[" + std::to_string(i) + "]", depth + 1));
          alts.push_back(n);
        }
        return union_of(std::move(alts));
      }
    }
    if (const auto c = s.find("const"); c != s.end()) return literal(*c);
    if (const auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return fail(path + ".enum", "must be a non-empty array");
      std::vector<const SchemaNode*> alts;
      for (const json& v : *e) alts.push_back(literal(v));
      return union_of(std::move(alts));
    }
    const auto t = s.find("type");
    if (t == s.end()) {
      for (const char* key : kRangeKeys)
        if (s.contains(key)) return fail(path, "'" + std::string(key) + "' without \"type\": \"integer\" is not supported");
      if (s.contains("minLength") || s.contains("maxLength"))
        return fail(path, "'minLength' / 'maxLength' without \"type\": \"string\" is not supported");
      return make(SchemaNode::Kind::kAny);
    }
    if (t->is_array()) {
      if (t->empty()) return fail(path + ".type", "must not be empty");
      std::vector<const SchemaNode*> alts;
      for (const json& name : *t) {
        if (!name.is_string()) return fail(path + ".type", "must hold type names");
        FERRY_ASSIGN_OR_RETURN(const SchemaNode* n, typed(s, name.get<std::string>(), path, depth));
        alts.push_back(n);
      }
      return union_of(std::move(alts));
    }
    if (!t->is_string()) return fail(path + ".type", "must be a type name or an array of them");
    return typed(s, t->get<std::string>(), path, depth);
  }

  Expected<const SchemaNode*> typed(const json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "string") {
      SchemaNode* n = make(SchemaNode::Kind::kString);
      for (const char* key : {"minLength", "maxLength"}) {
        const auto it = s.find(key);
        if (it == s.end()) continue;
        if (!it->is_number_unsigned()) return fail(path + "." + key, "must be a non-negative integer");
        (key[1] == 'i' ? n->min_length : n->max_length) = it->get<int64_t>();
      }
      if (n->max_length < n->min_length) return fail(path, "has maxLength below minLength");
      return static_cast<const SchemaNode*>(n);
    }
    if (type == "integer") {
      SchemaNode* n = make(SchemaNode::Kind::kInteger);
      for (const char* key : kRangeKeys) {
        const auto it = s.find(key);
        if (it == s.end()) continue;
        if (!it->is_number()) return fail(path + "." + key, "must be a number");
        const double v = it->get<double>();
        if (!(std::fabs(v) < 9e18)) return fail(path + "." + key, "is out of range");
        const std::string k = key;
        if (k == "minimum") n->min_value = std::max(n->min_value, static_cast<int64_t>(std::ceil(v)));
        if (k == "exclusiveMinimum") n->min_value = std::max(n->min_value, static_cast<int64_t>(std::floor(v)) + 1);
        if (k == "maximum") n->max_value = std::min(n->max_value, static_cast<int64_t>(std::floor(v)));
        if (k == "exclusiveMaximum") n->max_value = std::min(n->max_value, static_cast<int64_t>(std::ceil(v)) - 1);
      }
      if (n->max_value < n->min_value) return fail(path, "admits no integer (its minimum is above its maximum)");
      return static_cast<const SchemaNode*>(n);
    }
    if (type == "number") {
      for (const char* key : kRangeKeys)
        if (s.contains(key)) return fail(path, "'" + std::string(key) + "' of a \"number\" is not supported (only of an \"integer\")");
      return make(SchemaNode::Kind::kNumber);
    }
    if (type == "boolean") return union_of({literal(true), literal(false)});
    if (type == "null") return literal(nullptr);
    if (type == "array") {
      SchemaNode* n = make(SchemaNode::Kind::kArray);
      if (const auto it = s.find("items"); it != s.end()) {
        FERRY_ASSIGN_OR_RETURN(n->items, node(*it, path + ".items", depth + 1));
      } else {
        n->items = make(SchemaNode::Kind::kAny);
      }
      if (const auto it = s.find("minItems"); it != s.end()) {
        if (!it->is_number_unsigned()) return fail(path + ".minItems", "must be a non-negative integer");
        n->min_items = it->get<int64_t>();
      }
      if (const auto it = s.find("maxItems"); it != s.end()) {
        if (!it->is_number_unsigned()) return fail(path + ".maxItems", "must be a non-negative integer");
        n->max_items = it->get<int64_t>();
      }
      if (n->max_items < n->min_items) return fail(path, "has maxItems below minItems");
      return static_cast<const SchemaNode*>(n);
    }
    if (type == "object") {
      SchemaNode* n = make(SchemaNode::Kind::kObject);
      const auto props = s.find("properties");
      if (props == s.end() || props->empty()) {
        // No declared properties: any keys, with additionalProperties' schema (any value by default).
        n->open = true;
        n->any_value = make(SchemaNode::Kind::kAny);
        if (const auto ap = s.find("additionalProperties"); ap != s.end() && !ap->is_boolean()) {
          FERRY_ASSIGN_OR_RETURN(n->any_value, node(*ap, path + ".additionalProperties", depth + 1));
        }
      } else {
        if (!props->is_object()) return fail(path + ".properties", "must be an object");
        if (props->size() > JsonSchema::kMaxProperties)
          return fail(path + ".properties", "has more than " + std::to_string(JsonSchema::kMaxProperties) + " properties");
        for (auto it = props->begin(); it != props->end(); ++it) {
          n->keys.push_back(json(it.key()).dump());
          FERRY_ASSIGN_OR_RETURN(const SchemaNode* v, node(it.value(), path + ".properties." + it.key(), depth + 1));
          n->values.push_back(v);
        }
      }
      if (const auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) return fail(path + ".required", "must be an array of property names");
        for (const json& name : *req) {
          if (!name.is_string()) return fail(path + ".required", "must be an array of property names");
          const std::string key = json(name.get<std::string>()).dump();
          size_t i = 0;
          while (i < n->keys.size() && n->keys[i] != key) ++i;
          if (i == n->keys.size()) return fail(path + ".required", "names " + key + ", which is not in properties");
          n->required |= uint64_t{1} << i;
        }
      }
      return static_cast<const SchemaNode*>(n);
    }
    return fail(path + ".type", "'" + type + "' is not a JSON Schema type");
  }

  Expected<const SchemaNode*> ref(const json& r, const std::string& path, int depth) {
    if (!r.is_string()) return fail(path + ".$ref", "must be a string");
    const std::string target = r.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    // A JSON pointer into this schema ("#/$defs/Name", "#/definitions/Name", "#").
    const json* def = nullptr;
    if (!target.empty() && target[0] == '#') {
      try {
        const json::json_pointer ptr(target.substr(1));
        if (root_.contains(ptr)) def = &root_.at(ptr);
      } catch (const json::exception&) {
      }
    }
    if (def == nullptr) return fail(path + ".$ref", "'" + target + "' does not name a definition of this schema");
    // A union of one, filled in below: a reference inside the definition finds it already.
    SchemaNode* holder = make(SchemaNode::Kind::kUnion);
    refs_[target] = holder;
    FERRY_ASSIGN_OR_RETURN(const SchemaNode* body, node(*def, target, depth + 1));
    holder->alts = {body};
    return static_cast<const SchemaNode*>(holder);
  }

  SchemaNode* make(SchemaNode::Kind kind) {
    out_->nodes_.push_back(std::make_unique<SchemaNode>());
    out_->nodes_.back()->kind = kind;
    return out_->nodes_.back().get();
  }
  const SchemaNode* literal(const json& v) {
    SchemaNode* n = make(SchemaNode::Kind::kLiteral);
    n->text = v.dump();
    return n;
  }
  const SchemaNode* union_of(std::vector<const SchemaNode*> alts) {
    if (alts.size() == 1) return alts[0];
    SchemaNode* n = make(SchemaNode::Kind::kUnion);
    n->alts = std::move(alts);
    return n;
  }
  static Status fail(const std::string& path, const std::string& what) {
    return make_error(ErrorCode::kInvalidArgument, "%s: %s", where_of(path).c_str(), what.c_str());
  }

 private:
  const json& root_;
  JsonSchema* out_;
  std::map<std::string, const SchemaNode*> refs_;
};

std::shared_ptr<const JsonSchema> JsonSchema::any_object() {
  auto s = std::make_shared<JsonSchema>();
  const json empty = json::object();
  SchemaCompiler c(empty, s.get());
  SchemaNode* obj = c.make(SchemaNode::Kind::kObject);
  obj->open = true;
  obj->any_value = c.make(SchemaNode::Kind::kAny);
  s->root_ = obj;
  return s;
}

Expected<std::shared_ptr<const JsonSchema>> JsonSchema::compile(const json& schema) {
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler c(schema, s.get());
  FERRY_ASSIGN_OR_RETURN(const SchemaNode* root, c.node(schema, "", 0));
  // The reply ends when its top-level value closes: only an object (behind references, or each
  // alternative of an anyOf) has a close.
  std::function<bool(const SchemaNode*, int)> object = [&](const SchemaNode* n, int depth) {
    if (n->kind == SchemaNode::Kind::kObject) return true;
    if (n->kind != SchemaNode::Kind::kUnion || n->alts.empty() || depth > 64) return false;
    for (const SchemaNode* a : n->alts)
      if (!object(a, depth + 1)) return false;
    return true;
  };
  if (!object(root, 0))
    return make_error(ErrorCode::kInvalidArgument, "the schema: its top level must be an object (\"type\": \"object\")");
  s->root_ = root;
  return std::shared_ptr<const JsonSchema>(std::move(s));
}

}  // namespace ferry::serve
