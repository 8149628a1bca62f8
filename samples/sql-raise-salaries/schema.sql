CREATE TABLE departments (
    id INT NOT NULL PRIMARY KEY,
    name VARCHAR(50) NOT NULL,
    CONSTRAINT uq_departments_name UNIQUE (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE employees (
    id INT NOT NULL PRIMARY KEY,
    name VARCHAR(50) NOT NULL,
    department_id INT NOT NULL,
    hired_on DATE NOT NULL,
    salary DECIMAL(10, 2) NOT NULL,
    CONSTRAINT fk_employees_department FOREIGN KEY (department_id) REFERENCES departments (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
